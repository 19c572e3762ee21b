// adjit/eigen.h — Eigen matrices in and out of jitted functions, without
// copies where the layouts agree. Optional: include it after Eigen
// (`find_package(Eigen3)`, `Eigen3::Eigen`); adjit itself does not need Eigen.
//
// adjit's arrays are row-major. An Eigen matrix declared Eigen::RowMajor (or
// any vector) has the same layout and is viewed in place; Eigen's default,
// column-major, is the row-major layout of its transpose: view_transposed
// views it as such, to_array copies it into row-major order.
#pragma once

#include <adjit/array.h>

#include <Eigen/Core>

#include <string>
#include <type_traits>

namespace adjit::eigen {

namespace detail {

template <class Derived> Shape shapeOf(const Eigen::DenseBase<Derived>& m, bool transposed) {
  const auto rows = static_cast<int64_t>(m.rows()), cols = static_cast<int64_t>(m.cols());
  if (Derived::IsVectorAtCompileTime) return {rows * cols};
  return transposed ? Shape{cols, rows} : Shape{rows, cols};
}

/// The matrix's data is one block: inner stride 1, outer stride the inner size.
template <class Derived> void expectContiguous(const Eigen::DenseBase<Derived>& m, const char* what) {
  const auto& d = m.derived();
  if (m.size() > 1 && (d.innerStride() != 1 || (d.outerStride() != d.innerSize() && d.outerSize() > 1)))
    throw Error(std::string(what) + ": the matrix's data is not contiguous (a block or a strided map); copy it with to_array");
}

template <class Derived, class Data> Array viewOf(Data* data, const Eigen::DenseBase<Derived>& m, bool transposed) {
  static_assert(static_cast<bool>(Derived::Flags & Eigen::DirectAccessBit),
                "adjit::eigen::view: the expression has no data of its own (evaluate it into a matrix first)");
  using Scalar = typename Derived::Scalar;
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> || std::is_same_v<Scalar, int32_t> ||
                    std::is_same_v<Scalar, int64_t>,
                "adjit::eigen: the scalar type must be float, double, int32_t or int64_t");
  expectContiguous(m, transposed ? "adjit::eigen::view_transposed" : "adjit::eigen::view");
  return Array::view(data, shapeOf(m, transposed));
}

} // namespace detail

/// A view of a row-major matrix, or of any vector, as an Array of shape
/// [rows, cols] ([size] for a vector): no copy. The matrix must outlive the
/// view. A column-major matrix (Eigen's default) is an error at compile time:
/// use view_transposed or to_array.
template <class Derived> Array view(Eigen::PlainObjectBase<Derived>& m) {
  static_assert(Derived::IsVectorAtCompileTime || Derived::IsRowMajor,
                "adjit::eigen::view: a column-major matrix is the transpose of adjit's row-major layout; declare it "
                "Eigen::RowMajor, or use view_transposed (shape [cols, rows]) or to_array (a row-major copy)");
  return detail::viewOf(m.data(), m, false);
}
template <class Derived> Array view(const Eigen::PlainObjectBase<Derived>& m) {
  static_assert(Derived::IsVectorAtCompileTime || Derived::IsRowMajor,
                "adjit::eigen::view: a column-major matrix is the transpose of adjit's row-major layout; declare it "
                "Eigen::RowMajor, or use view_transposed (shape [cols, rows]) or to_array (a row-major copy)");
  return detail::viewOf(m.data(), m, false);
}
/// The same for an Eigen::Map over the caller's buffer (contiguous).
template <class M, int Options, class Stride> Array view(const Eigen::Map<M, Options, Stride>& m) {
  static_assert(M::IsVectorAtCompileTime || M::IsRowMajor,
                "adjit::eigen::view: a column-major map is the transpose of adjit's row-major layout; use "
                "view_transposed or to_array");
  return detail::viewOf(m.data(), m, false);
}

/// A view of a column-major matrix as the row-major Array of its
/// transpose, shape [cols, rows]: no copy.
template <class Derived> Array view_transposed(Eigen::PlainObjectBase<Derived>& m) {
  static_assert(!Derived::IsRowMajor, "adjit::eigen::view_transposed: the matrix is row-major already; use view");
  return detail::viewOf(m.data(), m, true);
}
template <class Derived> Array view_transposed(const Eigen::PlainObjectBase<Derived>& m) {
  static_assert(!Derived::IsRowMajor, "adjit::eigen::view_transposed: the matrix is row-major already; use view");
  return detail::viewOf(m.data(), m, true);
}

/// A row-major copy of any matrix expression, shape [rows, cols] ([size] for a vector).
template <class Derived> Array to_array(const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  using RowMajor = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const RowMajor copy = m;
  Array a(Type{dtype_of<Scalar>(), detail::shapeOf(m, false)});
  if (copy.size() > 0) std::memcpy(a.raw(), copy.data(), static_cast<std::size_t>(copy.size()) * sizeof(Scalar));
  return a;
}

/// A row-major Eigen::Map over an Array's data (rank 0, 1 or 2: a 1-D array
/// is a column vector): no copy. The Array must outlive the map.
template <class Scalar> Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> map(Array& a) {
  if (a.shape().size() > 2) throw Error("adjit::eigen::map: expected an array of rank 0, 1 or 2, got " + a.type().str());
  const auto rows = a.shape().empty() ? 1 : a.shape()[0];
  const auto cols = a.shape().size() == 2 ? a.shape()[1] : 1;
  return {a.data<Scalar>(), static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols)};
}

/// A copy of an Array (rank 0, 1 or 2) as an Eigen matrix of any storage order.
template <class Matrix> Matrix to_matrix(const Array& a) {
  using Scalar = typename Matrix::Scalar;
  const auto m = map<Scalar>(const_cast<Array&>(a));
  if ((Matrix::RowsAtCompileTime != Eigen::Dynamic && Matrix::RowsAtCompileTime != m.rows()) ||
      (Matrix::ColsAtCompileTime != Eigen::Dynamic && Matrix::ColsAtCompileTime != m.cols()))
    throw Error("adjit::eigen::to_matrix: " + a.type().str() + " does not fit a " + std::to_string(Matrix::RowsAtCompileTime) +
                "x" + std::to_string(Matrix::ColsAtCompileTime) + " matrix");
  return m;
}

} // namespace adjit::eigen
