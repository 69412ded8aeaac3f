// expect: xgrad: this module member cannot be walked
// A std::list of layers is not one of the walked containers (vector, array, optional): a compile
// error, never 0 parameters.
#include <list>
#include "xgrad/xgrad.hpp"
struct Stack {
    BOOST_HANA_DEFINE_STRUCT(Stack, (std::list<xgrad::nn::Linear<double>>, layers));
};
int main() {
    Stack s;
    return int(xgrad::parameter_count(s));
}
