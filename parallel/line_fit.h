// The least-squares line time = alpha + beta * bytes, from the running sums of its points: what
// CommStats fits over a run's calls (parallel/comm_stats.h) and the link probe over its sizes
// (parallel/alpha_beta_probe.h) both read a latency and a bandwidth from.
#pragma once

namespace loom::parallel {

struct LineFit {
  double alpha = 0.0;      // the intercept: seconds at zero bytes (the mean time without a slope)
  double beta = 0.0;       // seconds per byte
  bool has_slope = false;  // false where the sizes are all alike: the slope would be noise
};

// Through N points with sums X, Y, XX, XY of bytes, seconds, bytes^2 and bytes * seconds. Without
// two distinct sizes (relative variance under 1e-9) beta is 0 and alpha the mean time; 0 for none.
inline LineFit fit_line(double n, double x, double y, double xx, double xy) {
  LineFit fit;
  const double variance = n * xx - x * x;
  if (n >= 2 && variance > 1e-9 * n * xx) {
    fit.beta = (n * xy - x * y) / variance;
    fit.alpha = (y - fit.beta * x) / n;
    fit.has_slope = true;
  } else if (n > 0) {
    fit.alpha = y / n;
  }
  return fit;
}

}  // namespace loom::parallel
