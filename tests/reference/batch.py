"""Runs several reference scripts in one Python process.

    batch.py FILE
        FILE holds one command a line: a script of this folder and its arguments, split as a shell
        would (no variables, no redirections). A line starting with `!` must fail (the script exits
        non-zero); any other must succeed. The first line that does otherwise ends the batch with its
        line number and command, and exit 1.

Why: importing torch and transformers takes 8-9 s of a 2-core machine's CPU, and the tests ran
some twenty reference commands each paying it; in one process they pay it once. Each script runs
as it would on its own (runpy, as __main__, with its own sys.argv); they share only the modules
already imported.
"""
import contextlib
import io
import pathlib
import runpy
import shlex
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent


def run(script, args):
    """Runs SCRIPT with ARGS; returns its exit status (0 when it returns normally)."""
    saved = sys.argv
    sys.argv = [str(HERE / script)] + args
    try:
        runpy.run_path(str(HERE / script), run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return 0
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
            return 1
        return e.code
    except Exception:  # a script that raises fails, as its own process would
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved
        sys.stdout.flush()
        sys.stderr.flush()


def main():
    lines = pathlib.Path(sys.argv[1]).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        must_fail = line.startswith("!")
        words = shlex.split(line[1:] if must_fail else line)
        if must_fail:  # its complaint is the expected outcome, not news
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                status = run(words[0], words[1:])
        else:
            status = run(words[0], words[1:])
        if (status != 0) != must_fail:
            want = "fail" if must_fail else "succeed"
            sys.exit(f"{sys.argv[1]}:{number}: `{line}` should {want} but exited {status}")


main()
