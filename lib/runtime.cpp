// libxgrad's runtime without templates (the GEMM back end's choice, oneDNN's matmul, the products
// rounded to bfloat16, the thread pool, the tape and its printer, the text of shapes and formulas,
// gradcheck's checker and its registry's search), compiled as one unit: about half the CPU of one
// unit each.
#include "gemm_choice.cpp"
#include "gemm_onednn.cpp"
#include "gemm_bfloat16.cpp"
#include "parallel.cpp"
#include "tape.cpp"
#include "tape_graph.cpp"
#include "shape_text.cpp"
#include "shapes.cpp"
#include "check_registry.cpp"
#include "gradcheck.cpp"
