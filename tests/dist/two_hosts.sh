#!/bin/sh
# Two "hosts" on one machine, then COMMAND with tests/dist/mpirun.sh launching across them:
#
#   tests/dist/two_hosts.sh [--slots N] COMMAND [ARGS...]
#
# Each host is a network namespace of its own (with its own hostname, a UTS namespace), the two
# joined by a veth pair with addresses on that link only: host 1 is 10.77.0.1, host 2 10.77.0.2
# (10.77.0.0/24; the addresses exist only inside this run's namespaces, so parallel runs do not
# collide: the names carry this shell's pid). COMMAND runs with XGRAD_HOSTS set (below), which
# makes tests/dist/mpirun.sh start mpirun inside host 1 with a hostfile of both addresses (N slots
# each, default 1), and reach host 2 through tests/dist/netns_rsh.sh (what ssh is on a cluster).
# The namespaces are removed, with any process left in them, on every exit: success, failure,
# interruption (INT, TERM). Without root, `ip`, `unshare` or Open MPI it says why and exits 77
# (meson: skipped).
#
# COMMAND sees: XGRAD_HOSTS="NS1 NS2" (the namespaces), XGRAD_HOSTFILE, XGRAD_HOST_VETH="VETH1 VETH2"
# (each host's end of the link, inside its namespace), XGRAD_HOST_NAMES="xgrad-host1 xgrad-host2".
set -eu
slots=1
[ "${1:-}" != --slots ] || { slots=$2; shift 2; }
skip() { echo "SKIP: $*"; exit 77; }
for tool in ip unshare mpirun; do
  command -v "$tool" > /dev/null || skip "no $tool here (multi-host tests need iproute2, util-linux and Open MPI)"
done
here=$(cd "$(dirname "$0")" && pwd)
ns1=xgrad$$h1 ns2=xgrad$$h2
dir=$(mktemp -d) child=
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  trap - EXIT INT TERM
  [ -z "$child" ] || kill "$child" 2> /dev/null || true
  for ns in $ns1 $ns2; do
    # Whatever a test left running there (a hung rank, an orted), then the namespace and its veth end.
    pids=$(ip netns pids "$ns" 2> /dev/null || true)
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$pids" ] || kill -9 $pids 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ip netns add "$ns1" 2> "$dir/err" || skip "cannot create a network namespace (needs root): $(cat "$dir/err")"
ip netns add "$ns2"
ip link add "${ns1}v" netns "$ns1" type veth peer name "${ns2}v" netns "$ns2"
ip -n "$ns1" addr add 10.77.0.1/24 dev "${ns1}v"
ip -n "$ns2" addr add 10.77.0.2/24 dev "${ns2}v"
for ns in $ns1 $ns2; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "${ns}v" up
done
printf '10.77.0.1 slots=%s\n10.77.0.2 slots=%s\n' "$slots" "$slots" > "$dir/hostfile"
! command -v ping > /dev/null || ip netns exec "$ns1" ping -c 1 -W 5 10.77.0.2 > /dev/null ||
  { echo "FAIL: the veth link between the two hosts does not carry packets"; exit 1; }
export XGRAD_HOSTS="$ns1 $ns2" XGRAD_HOSTFILE="$dir/hostfile" XGRAD_HOST_VETH="${ns1}v ${ns2}v"
export XGRAD_HOST_NAMES="xgrad-host1 xgrad-host2" XGRAD_NETNS_RSH="$here/netns_rsh.sh"
# In the background, so that INT or TERM reaches the trap at once and not when COMMAND ends.
"$@" &
child=$!
status=0
wait "$child" || status=$?
exit "$status"
