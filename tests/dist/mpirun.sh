#!/bin/sh
# mpirun with exactly what xgrad's tests need, in one place (tests/dist/meson.build, docs/distributed.md):
#
#   tests/dist/mpirun.sh [--tcp | --cma] [--busy-poll] [--timeout SECONDS] -np N PROGRAM [ARGS...]
#
# - OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1: CI and containers run as root, which mpirun refuses otherwise
#   (the same as --allow-run-as-root, but harmless when not root).
# - --oversubscribe: more ranks than cores (world size 3 on a 2-core machine); Open MPI then yields
#   the core while a rank waits instead of spinning.
# - --bind-to none: the machine is shared; pinning ranks to cores others use only slows them.
# - --mca mpi_yield_when_idle 1: a rank waiting for another gives its core away instead of
#   spinning; on a loaded 2-core machine a spinning rank starves the one it waits for (the base
#   bench step over 2 ranks: 496 ms spinning, 136 ms yielding, with the load average at 4).
#   Across hosts on 2 cores it matters more: the spinning ranks starve the kernel's packet processing
#   (docs/distributed.md, "On a real cluster"). --busy-poll leaves Open MPI's default (spinning), to
#   measure that.
# - --mca pml ob1: the plain point-to-point layer; UCX probes network devices a container lacks.
# - --mca btl self,vader --mca btl_vader_single_copy_mechanism none: shared memory between ranks,
#   without the single-copy path (CMA reads another process's memory with process_vm_readv, which
#   a container's seccomp or ptrace policy forbids: "Read -1, expected N, errno = 1").
# - --cma instead: shared memory with the single-copy path, where the machine allows it (the
#   benchmarks: 4 MiB of gradients sum in 1.55 ms instead of 2.5 ms; bench/dist_scaling.sh uses it
#   when a probe shows it works).
# - --tcp instead: the TCP transport on the loopback interface, what separate machines use
#   (btl and Open MPI's own out-of-band channel both restricted to lo).
# - --timeout SECONDS (default 60): a hang fails (exit status 110 or so) instead of waiting forever.
# - Inside tests/dist/two_hosts.sh (XGRAD_HOSTS set): across its two hosts, as on a cluster. mpirun
#   starts inside host 1 with the hostfile of both addresses, reaches host 2 through
#   tests/dist/netns_rsh.sh (ssh's place: --mca plm_rsh_agent), and both the data (btl tcp) and
#   Open MPI's control channel (oob) use the hosts' link only (10.77.0.0/24). A link that goes down
#   ends the job through the control channel's TCP keepalive (idle 5 s, then 3 probes 2 s apart:
#   mpirun and the remote daemon each see the other lost and end their ranks). Open MPI's default
#   (300 s, then 9 probes 20 s apart) takes 8 minutes; the data channel (btl tcp) has none and waits
#   forever.
set -eu
transport="--mca btl self,vader --mca btl_vader_single_copy_mechanism none"
timeout=60 yield=1
while [ $# -gt 0 ]; do
  case $1 in
    --tcp) transport="--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"; shift ;;
    --cma) transport="--mca btl self,vader --mca btl_vader_single_copy_mechanism cma"; shift ;;
    --busy-poll) yield=0; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    *) break ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common="--oversubscribe --bind-to none --mca mpi_yield_when_idle $yield --mca pml ob1"
# shellcheck disable=SC2086  # $common and $transport are lists of words
if [ -z "${XGRAD_HOSTS:-}" ]; then
  exec mpirun $common $transport --timeout "$timeout" "$@"
fi
# Across two_hosts.sh's hosts: mpirun inside host 1, under host 1's name (netns_rsh.sh names host 2).
# shellcheck disable=SC2086,SC2016  # lists of words; $0 and $@ are the inner shell's
exec ip netns exec "${XGRAD_HOSTS%% *}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${XGRAD_HOST_NAMES%% *}" \
  mpirun $common --hostfile "$XGRAD_HOSTFILE" --mca plm_rsh_agent "$XGRAD_NETNS_RSH" --mca btl self,tcp \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 --timeout "$timeout" "$@"
