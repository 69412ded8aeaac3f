#!/bin/sh
# The whole unit suite (PyTorch and nanoGPT parity, gradchecks, training) once per GEMM back end of
# this build, forced with XGRAD_GEMM: a back end changes rounding only, so every test passes on each.
#   check_gemm_backends.sh XGRAD_TESTS XGRAD
# XGRAD_GEMM_TEST_CASES: a doctest filter for a shorter run (scripts/sanitize: the GEMM and parity
# cases, not the whole suite three more times under the sanitizers).
set -u
tests=$1 xgrad=$2
ran=""
for backend in xgrad openblas onednn; do
    # a back end this build lacks (oneDNN not found, or no AVX-512 for xgrad's kernel) is refused
    if ! XGRAD_GEMM=$backend "$xgrad" bench --steps 1 --warmup 0 > /dev/null 2>&1; then
        echo "GEMM $backend: not in this build, skipped"
        continue
    fi
    XGRAD_GEMM=$backend "$tests" ${XGRAD_GEMM_TEST_CASES:+"-tc=$XGRAD_GEMM_TEST_CASES"} > "${TMPDIR:-/tmp}/xgrad-gemm-$backend-$$.log" 2>&1 ||
        { tail -n 30 "${TMPDIR:-/tmp}/xgrad-gemm-$backend-$$.log"; echo "FAIL: unit tests with XGRAD_GEMM=$backend"; exit 1; }
    echo "GEMM $backend: $(grep '^\[doctest\] test cases' "${TMPDIR:-/tmp}/xgrad-gemm-$backend-$$.log")"
    rm -f "${TMPDIR:-/tmp}/xgrad-gemm-$backend-$$.log"
    ran="$ran $backend"
done
[ -n "$ran" ] || { echo "FAIL: no GEMM back end ran"; exit 1; }
