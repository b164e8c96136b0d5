// Compiled by check_compile_fail.cmake with -DELEMENT=<type>, never as part of a target: with an
// element type dsinfer holds (float, long long) it must compile; with any other (std::complex,
// a struct, char, long double, a pointer) it must fail on dtype.hpp's static_assert ("T is not
// a tensor element type"), not at link time.
#include <complex>
#include <cstdint>
#include <vector>

#include "dsinfer/tensor.hpp"

struct NotAnElement {
    int x;
};

int from_vector_of_element() {
    std::vector<ELEMENT> values(2);
    const dsinfer::Tensor t = dsinfer::Tensor::from_vector(dsinfer::Shape{2}, values);
    return t.num_dims();
}

int read_as_element(const dsinfer::Tensor& t) {
    return t.data<ELEMENT>() != nullptr ? 1 : 0;
}
