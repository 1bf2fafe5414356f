#include "gpushare/elf_symbols.h"

#include <dlfcn.h>
#include <elf.h>

#include <cstdint>
#include <cstring>

namespace purser::gpushare {

namespace {

// glibc rewrites the dynamic section's addresses when it relocates an object; the vDSO's (and
// some architectures') stay relative. An address below the load base is relative.
template <typename T>
const T* at(const struct link_map* lm, ElfW(Addr) value) {
  if (value < lm->l_addr) value += lm->l_addr;
  return reinterpret_cast<const T*>(value);
}

uint32_t gnuHash(const char* s) {
  uint32_t h = 5381;
  for (; *s != '\0'; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

uint32_t sysvHash(const char* s) {
  uint32_t h = 0;
  for (; *s != '\0'; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    const uint32_t g = h & 0xf0000000u;
    if (g != 0) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

struct Tables {
  const ElfW(Sym) * symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Half) * versym = nullptr;
};

}  // namespace

void* definedIn(const struct link_map* lm, const char* name, bool* is_ifunc) {
  *is_ifunc = false;
  if (lm == nullptr || lm->l_ld == nullptr) return nullptr;
  Tables t;
  for (const ElfW(Dyn)* d = lm->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        t.symtab = at<ElfW(Sym)>(lm, d->d_un.d_ptr);
        break;
      case DT_STRTAB:
        t.strtab = at<char>(lm, d->d_un.d_ptr);
        break;
      case DT_GNU_HASH:
        t.gnu_hash = at<uint32_t>(lm, d->d_un.d_ptr);
        break;
      case DT_HASH:
        t.sysv_hash = at<uint32_t>(lm, d->d_un.d_ptr);
        break;
      case DT_VERSYM:
        t.versym = at<ElfW(Half)>(lm, d->d_un.d_ptr);
        break;
      default:
        break;
    }
  }
  if (t.symtab == nullptr || t.strtab == nullptr) return nullptr;
  const ElfW(Sym)* best = nullptr;
  auto consider = [&](uint32_t i) {
    const ElfW(Sym)& s = t.symtab[i];
    if (s.st_shndx == SHN_UNDEF || std::strcmp(t.strtab + s.st_name, name) != 0) return;
    const int bind = ELF64_ST_BIND(s.st_info);
    const int type = ELF64_ST_TYPE(s.st_info);
    if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) return;
    if (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC && type != STT_NOTYPE) {
      return;
    }
    const bool hidden = t.versym != nullptr && (t.versym[i] & 0x8000) != 0;
    if (best == nullptr || !hidden) best = &s;
  };
  if (t.gnu_hash != nullptr) {
    const uint32_t nbuckets = t.gnu_hash[0];
    const uint32_t symoffset = t.gnu_hash[1];
    const uint32_t bloom_size = t.gnu_hash[2];
    if (nbuckets == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(t.gnu_hash + 4);
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    const uint32_t h = gnuHash(name);
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; ++i) {
      const uint32_t h2 = chain[i - symoffset];
      if ((h | 1) == (h2 | 1)) consider(i);
      if ((h2 & 1) != 0) break;
    }
  } else if (t.sysv_hash != nullptr) {
    const uint32_t nbucket = t.sysv_hash[0];
    if (nbucket == 0) return nullptr;
    const uint32_t* bucket = t.sysv_hash + 2;
    const uint32_t* chain = bucket + nbucket;
    for (uint32_t i = bucket[sysvHash(name) % nbucket]; i != STN_UNDEF; i = chain[i]) consider(i);
  }
  if (best == nullptr) return nullptr;
  *is_ifunc = ELF64_ST_TYPE(best->st_info) == STT_GNU_IFUNC;
  return reinterpret_cast<void*>(lm->l_addr + best->st_value);
}

const struct link_map* objectOf(const void* address) {
  Dl_info info;
  struct link_map* lm = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0) return nullptr;
  return lm;
}

}  // namespace purser::gpushare
