#!/usr/bin/env bash
# A two-level network on one machine, for tests and benchmarks of data parallelism across nodes.
#
#   scripts/fabric.sh --nodes N --ranks-per-node R [--inter-mbit B] [--port P] -- COMMAND [ARGS...]
#
# Each node is a network namespace holding R ranks; its ranks talk to each other over the
# namespace's loopback (the fast link inside a node) and to other nodes through one veth each,
# joined by a bridge in a namespace of its own (the slow link between nodes), whose both
# directions tc's tbf limits to B Mbit/s when --inter-mbit is given (the kernel here has no netem,
# so no delay is emulated). COMMAND runs once per rank inside its node's namespace, with RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set as torchrun sets them,
# and GLOO_SOCKET_IFNAME naming the node's veth (the namespaces share the machine's host name, so
# loom tells its nodes apart by LOCAL_WORLD_SIZE, and Gloo must not resolve the name).
# Addresses are 198.18.0.1, .2, ... (198.18.0.0/15, the benchmarking range). The first rank to fail
# ends the job with its status (the others are stopped); else 0. Needs root (ip netns).
#
# Safety: nothing is created in the machine's own namespace. Every veth pair is made inside the
# bridge's namespace with its peer created directly in the node's namespace, under this script's
# own names (lfb*, lfs*), so no name can meet one of the machine's interfaces (a peer named eth0
# once moved the machine's real interface into a namespace, and deleting that namespace took the
# network away). Everything is torn down on exit, whatever happens, and the machine's interfaces
# and routes are compared with what they were before: a difference is reported and fails the run.
set -uo pipefail

nodes=0 per_node=0 mbit=0 port=29500
usage() {
  echo "usage: $0 --nodes N --ranks-per-node R [--inter-mbit B] [--port P] -- COMMAND [ARGS...]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes | --ranks-per-node | --inter-mbit | --port)
      [ $# -ge 2 ] || { echo "fabric.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --ranks-per-node) per_node="$2"; shift 2 ;;
    --inter-mbit) mbit="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "fabric.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "fabric.sh: no COMMAND after --" >&2; usage; }
for value in "$nodes" "$per_node" "$port"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || { echo "fabric.sh: --nodes, --ranks-per-node and --port take positive integers" >&2; usage; }
done
[[ "$mbit" =~ ^[0-9]+$ ]] || { echo "fabric.sh: --inter-mbit takes a whole number of Mbit/s" >&2; usage; }
[ "$nodes" -le 200 ] || { echo "fabric.sh: at most 200 nodes" >&2; usage; }
[ "$(id -u)" = 0 ] || { echo "fabric.sh: needs root (network namespaces)" >&2; exit 2; }
command -v ip > /dev/null || { echo "fabric.sh: needs iproute2's ip" >&2; exit 2; }

tag="lf$$"
switch="${tag}-sw"
namespaces=()
pids=()
host_links_before="$(ip -o link show | sed 's/^[0-9]*: //' | awk '{print $1}' | sort)"
host_routes_before="$(ip route show | sort)"

teardown() {
  local code=$?
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2> /dev/null; done
  for ns in ${namespaces[@]+"${namespaces[@]}"}; do ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null; done
  for ns in ${namespaces[@]+"${namespaces[@]}"}; do ip netns del "$ns" 2> /dev/null; done
  local links routes
  links="$(ip -o link show | sed 's/^[0-9]*: //' | awk '{print $1}' | sort)"
  routes="$(ip route show | sort)"
  if [ "$links" != "$host_links_before" ] || [ "$routes" != "$host_routes_before" ]; then
    echo "fabric.sh: the machine's interfaces or routes changed:" >&2
    diff <(echo "$host_links_before") <(echo "$links") >&2
    diff <(echo "$host_routes_before") <(echo "$routes") >&2
    code=3
  fi
  exit "$code"
}
trap teardown EXIT
trap 'exit 130' INT TERM

step() {  # step WHAT COMMAND...: runs COMMAND, or stops naming WHAT
  local what="$1"
  shift
  "$@" || { echo "fabric.sh: could not $what" >&2; exit 2; }
}

ip netns add "$switch" || { echo "fabric.sh: ip netns add failed" >&2; exit 2; }
namespaces+=("$switch")
step "make the bridge" ip -n "$switch" link add "${tag}br" type bridge
step "raise the bridge" ip -n "$switch" link set "${tag}br" up
for ((n = 0; n < nodes; n++)); do
  ns="${tag}-n$n"
  ip netns add "$ns" || { echo "fabric.sh: ip netns add $ns failed" >&2; exit 2; }
  namespaces+=("$ns")
  # Made inside the switch's namespace, the peer created directly in the node's.
  step "make node $n's link" ip -n "$switch" link add "lfs$n" type veth peer name "lfb$n" netns "$ns"
  step "attach node $n's link" ip -n "$switch" link set "lfs$n" master "${tag}br" up
  step "address node $n" ip -n "$ns" addr add "198.18.0.$((n + 1))/24" dev "lfb$n"
  step "raise node $n's link" ip -n "$ns" link set "lfb$n" up
  step "raise node $n's loopback" ip -n "$ns" link set lo up
  if [ "$mbit" -gt 0 ]; then
    # Both directions of the node's link: what it sends (its veth) and what it receives (the switch's side).
    for side in "$ns lfb$n" "$switch lfs$n"; do
      read -r where dev <<< "$side"
      step "limit node $n's link" ip netns exec "$where" tc qdisc add dev "$dev" root tbf rate "${mbit}mbit" \
        burst 64kb latency 400ms
    done
  fi
done

world=$((nodes * per_node))
for ((r = 0; r < world; r++)); do
  n=$((r / per_node))
  ip netns exec "${tag}-n$n" env RANK="$r" WORLD_SIZE="$world" LOCAL_RANK="$((r % per_node))" \
    LOCAL_WORLD_SIZE="$per_node" GROUP_RANK="$n" MASTER_ADDR=198.18.0.1 MASTER_PORT="$port" \
    GLOO_SOCKET_IFNAME="lfb$n" "$@" &
  pids+=($!)
done
# As torchrun and mpirun do: the first rank to fail ends the job (the teardown stops the others; a
# rank stuck in a collective with the failed one would otherwise keep the script waiting).
status=0
for ((left = world; left > 0; left--)); do
  finished=
  wait -n -p finished
  code=$?
  if [ "$code" != 0 ]; then
    status=$code
    # Said, so that a rank that ended without a word (a signal: 128 + its number) is found.
    for ((r = 0; r < world; r++)); do
      [ "${pids[$r]}" = "$finished" ] && echo "fabric.sh: rank $r (pid $finished) exited $code" >&2
    done
    break
  fi
done
[ "$status" = 0 ] && pids=()
exit "$status"
