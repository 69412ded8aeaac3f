#!/bin/sh
# What ssh is to mpirun on a cluster (`--mca plm_rsh_agent`), for the two hosts of
# tests/dist/two_hosts.sh: runs COMMAND inside the network namespace that holds ADDRESS, under that
# host's name (a UTS namespace of its own, as separate machines have).
#   netns_rsh.sh [OPTION...] ADDRESS COMMAND...
set -eu
while [ "${1#-}" != "$1" ]; do shift; done  # options meant for ssh
host=$1
shift
# shellcheck disable=SC2086  # lists of words
set -- "$host" "$*" $XGRAD_HOSTS $XGRAD_HOST_NAMES
case $1 in
  10.77.0.1) ns=$3 name=$5 ;;
  10.77.0.2) ns=$4 name=$6 ;;
  *) echo "netns_rsh.sh: no host $1 here (10.77.0.1 or 10.77.0.2)" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $name && exec sh -c \"\$0\"" "$2"
