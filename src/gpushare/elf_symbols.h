// Finding a symbol's definition in one loaded object by reading its dynamic symbol table, without
// calling dlsym: the shim replaces dlsym and dlvsym, so it finds the C library's own with this,
// and answers dlsym(RTLD_NEXT, ...) for its callers by walking the objects loaded after them.
// Reads only memory the dynamic linker mapped; async-signal-safe; no allocation.
#pragma once

#include <link.h>

namespace purser::gpushare {

// The address `name` has in `object` when the object itself defines it (not one of its
// dependencies), preferring the default version; nullptr otherwise. An indirect function
// (STT_GNU_IFUNC) is reported by `is_ifunc` so that the caller can ask the dynamic linker instead.
void* definedIn(const struct link_map* object, const char* name, bool* is_ifunc);

// The object that contains `address`, or nullptr.
const struct link_map* objectOf(const void* address);

}  // namespace purser::gpushare
