// expect: xgrad: eval(x) materializes an expression; to switch a model to evaluation mode use set_training(model, false)
// errors: 1
// eval has one meaning (materialize an expression); the module switch is set_training.
#include "xgrad/xgrad.hpp"
int main() {
    xgrad::Generator gen;
    xgrad::nn::Linear<double> lin(3, 2, gen);
    xgrad::eval(lin);
}
