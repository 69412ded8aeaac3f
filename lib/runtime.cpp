// libxgrad's runtime without templates (the GEMM back end's choice, oneDNN's matmul, the thread
// pool, the tape and its printer), compiled as one unit: about half the CPU of five.
#include "gemm_choice.cpp"
#include "gemm_onednn.cpp"
#include "parallel.cpp"
#include "tape.cpp"
#include "tape_graph.cpp"
