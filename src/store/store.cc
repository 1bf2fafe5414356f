#include "store/store.h"

#include "common/assert.h"

namespace purser::store {

int64_t Row::getInt(size_t i) const {
  const Value& v = values_.at(i);
  if (std::holds_alternative<std::monostate>(v)) return 0;
  PURSER_CHECK_MSG(std::holds_alternative<int64_t>(v), "column is not an integer");
  return std::get<int64_t>(v);
}

const std::string& Row::getText(size_t i) const {
  static const std::string kEmpty;
  const Value& v = values_.at(i);
  if (std::holds_alternative<std::monostate>(v)) return kEmpty;
  PURSER_CHECK_MSG(std::holds_alternative<std::string>(v), "column is not text");
  return std::get<std::string>(v);
}

const Blob& Row::getBlob(size_t i) const {
  static const Blob kEmpty;
  const Value& v = values_.at(i);
  if (std::holds_alternative<std::monostate>(v)) return kEmpty;
  PURSER_CHECK_MSG(std::holds_alternative<Blob>(v), "column is not a blob");
  return std::get<Blob>(v);
}

}  // namespace purser::store
