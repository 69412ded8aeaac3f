#!/bin/sh
# mpirun with exactly what xgrad's tests need, in one place (tests/dist/meson.build, docs/distributed.md):
#
#   tests/dist/mpirun.sh [--tcp | --cma] [--timeout SECONDS] -np N PROGRAM [ARGS...]
#
# - OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1: CI and containers run as root, which mpirun refuses otherwise
#   (the same as --allow-run-as-root, but harmless when not root).
# - --oversubscribe: more ranks than cores (world size 3 on a 2-core machine); Open MPI then yields
#   the core while a rank waits instead of spinning.
# - --bind-to none: the machine is shared; pinning ranks to cores others use only slows them.
# - --mca mpi_yield_when_idle 1: a rank waiting for another gives its core away instead of
#   spinning; on a loaded 2-core machine a spinning rank starves the one it waits for (the base
#   bench step over 2 ranks: 496 ms spinning, 136 ms yielding, with the load average at 4).
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
set -eu
transport="--mca btl self,vader --mca btl_vader_single_copy_mechanism none"
timeout=60
while [ $# -gt 0 ]; do
  case $1 in
    --tcp) transport="--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"; shift ;;
    --cma) transport="--mca btl self,vader --mca btl_vader_single_copy_mechanism cma"; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    *) break ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2086  # $transport is a list of words
exec mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca pml ob1 $transport --timeout "$timeout" "$@"
