/*
 * randomx.h -- the C interface of proofkit's librandomx.so.0.
 *
 * Binary- and source-compatible with the randomx.h of tevador/RandomX v2.0 (same types, flag
 * values and functions), implemented in Rust by crates/proofkit-randomx-capi. Differences from
 * the reference (NULL pointers are ignored instead of crashing, the caller's rounding mode is
 * always kept, ...) are listed in that crate's README.md.
 *
 * Licence: MIT OR Apache-2.0, as the rest of proofkit.
 */
#ifndef RANDOMX_H
#define RANDOMX_H

#include <stddef.h>
#include <stdint.h>

/* Bytes in a hash (and in a commitment). */
#define RANDOMX_HASH_SIZE 32
/* Bytes in one dataset item. */
#define RANDOMX_DATASET_ITEM_SIZE 64

#ifndef RANDOMX_EXPORT
#define RANDOMX_EXPORT
#endif

/* Option bits for caches, datasets and VMs; OR them together. */
typedef enum {
  RANDOMX_FLAG_DEFAULT = 0,       /* portable: software AES, light mode, ordinary pages */
  RANDOMX_FLAG_LARGE_PAGES = 1,   /* hugetlb pages; allocation fails if none can be had */
  RANDOMX_FLAG_HARD_AES = 2,      /* AES-NI (VM creation fails without it) */
  RANDOMX_FLAG_FULL_MEM = 4,      /* fast mode: the VM reads a dataset */
  RANDOMX_FLAG_JIT = 8,           /* VM: compile programs (x86-64; else the interpreter runs) */
  RANDOMX_FLAG_SECURE = 16,       /* with JIT: code pages never writable and executable at once */
  RANDOMX_FLAG_ARGON2_SSSE3 = 32, /* cache: require SSSE3 */
  RANDOMX_FLAG_ARGON2_AVX2 = 64,  /* cache: require AVX2 */
  RANDOMX_FLAG_ARGON2 = 96,       /* both Argon2 bits */
  RANDOMX_FLAG_V2 = 128,          /* VM computes RandomX v2 */
} randomx_flags;

/* Opaque handles. */
typedef struct randomx_dataset randomx_dataset;
typedef struct randomx_cache randomx_cache;
typedef struct randomx_vm randomx_vm;

#if defined(__cplusplus)

#ifdef __cpp_constexpr
#define CONSTEXPR constexpr
#else
#define CONSTEXPR
#endif

/* C++ has no implicit int -> enum conversion: let flags combine with | and &. */
inline CONSTEXPR randomx_flags operator|(randomx_flags x, randomx_flags y) {
  return static_cast<randomx_flags>(static_cast<int>(x) | static_cast<int>(y));
}
inline CONSTEXPR randomx_flags operator&(randomx_flags x, randomx_flags y) {
  return static_cast<randomx_flags>(static_cast<int>(x) & static_cast<int>(y));
}
inline randomx_flags &operator|=(randomx_flags &x, randomx_flags y) {
  x = x | y;
  return x;
}

extern "C" {
#endif

/*
 * Flags suited to this CPU: JIT (on x86-64, aarch64 and riscv64, like the reference), HARD_AES
 * when the CPU has AES-NI, ARGON2_AVX2 / ARGON2_SSSE3 when it has those instruction sets.
 * LARGE_PAGES, FULL_MEM, SECURE and V2 are never included: add them yourself.
 */
RANDOMX_EXPORT randomx_flags randomx_get_flags(void);

/*
 * Allocates a 256 MiB cache. Flags used: LARGE_PAGES, JIT, ARGON2_SSSE3, ARGON2_AVX2.
 * Returns NULL when memory cannot be allocated, when LARGE_PAGES is set and no hugetlb pages
 * are available, or when an ARGON2 flag names an instruction set this CPU lacks.
 */
RANDOMX_EXPORT randomx_cache *randomx_alloc_cache(randomx_flags flags);

/*
 * Fills the cache from a key of keySize bytes (any length). Calling it again with the same key
 * does nothing. After a new key, call randomx_vm_set_cache on the VMs that use this cache.
 */
RANDOMX_EXPORT void randomx_init_cache(randomx_cache *cache, const void *key, size_t keySize);

/* The cache's memory (RANDOMX_ARGON_MEMORY KiB = 256 MiB). */
RANDOMX_EXPORT void *randomx_get_cache_memory(randomx_cache *cache);

/* Frees a cache. */
RANDOMX_EXPORT void randomx_release_cache(randomx_cache *cache);

/*
 * Allocates the dataset (randomx_dataset_item_count() * RANDOMX_DATASET_ITEM_SIZE bytes).
 * Only LARGE_PAGES is used. Returns NULL when memory cannot be allocated (or, with
 * LARGE_PAGES, when no hugetlb pages are available).
 */
RANDOMX_EXPORT randomx_dataset *randomx_alloc_dataset(randomx_flags flags);

/* Number of items in the dataset. */
RANDOMX_EXPORT unsigned long randomx_dataset_item_count(void);

/*
 * Computes dataset items startItem .. startItem + itemCount - 1 from an initialised cache.
 * Every item must be computed before a VM uses the dataset; threads may split the work into
 * non-overlapping ranges and call this concurrently.
 */
RANDOMX_EXPORT void randomx_init_dataset(randomx_dataset *dataset, randomx_cache *cache,
                                         unsigned long startItem, unsigned long itemCount);

/* The dataset's memory (randomx_dataset_item_count() * RANDOMX_DATASET_ITEM_SIZE bytes). */
RANDOMX_EXPORT void *randomx_get_dataset_memory(randomx_dataset *dataset);

/* Frees a dataset. */
RANDOMX_EXPORT void randomx_release_dataset(randomx_dataset *dataset);

/*
 * Creates a VM. Flags used: LARGE_PAGES (scratchpad), HARD_AES, FULL_MEM, JIT, SECURE, V2.
 * A light VM (no FULL_MEM) needs an initialised cache; a FULL_MEM VM needs a dataset.
 * Returns NULL when the scratchpad cannot be allocated, when a flag cannot be honoured on this
 * CPU, when the cache is NULL without FULL_MEM, or when the dataset is NULL with FULL_MEM.
 */
RANDOMX_EXPORT randomx_vm *randomx_create_vm(randomx_flags flags, randomx_cache *cache,
                                             randomx_dataset *dataset);

/*
 * Gives a light VM a (re-keyed) cache; does nothing if the VM already uses that cache with
 * that key. Both pointers must be valid.
 */
RANDOMX_EXPORT void randomx_vm_set_cache(randomx_vm *machine, randomx_cache *cache);

/* Gives a FULL_MEM VM another dataset. Both pointers must be valid. */
RANDOMX_EXPORT void randomx_vm_set_dataset(randomx_vm *machine, randomx_dataset *dataset);

/* Frees a VM. */
RANDOMX_EXPORT void randomx_destroy_vm(randomx_vm *machine);

/*
 * Writes the RandomX hash of inputSize bytes at input to output (RANDOMX_HASH_SIZE bytes).
 * One VM must not be used by two threads at once.
 */
RANDOMX_EXPORT void randomx_calculate_hash(randomx_vm *machine, const void *input,
                                           size_t inputSize, void *output);

/*
 * Pipelined hashing of a sequence of inputs:
 *   randomx_calculate_hash_first(vm, a)       starts a;
 *   randomx_calculate_hash_next(vm, b, out)   writes hash(a), starts b;
 *   randomx_calculate_hash_last(vm, out)      writes the hash of the input last started.
 * The reference may leave the caller's floating-point rounding mode changed; proofkit's does not.
 */
RANDOMX_EXPORT void randomx_calculate_hash_first(randomx_vm *machine, const void *input,
                                                 size_t inputSize);
RANDOMX_EXPORT void randomx_calculate_hash_next(randomx_vm *machine, const void *nextInput,
                                                size_t nextInputSize, void *output);
RANDOMX_EXPORT void randomx_calculate_hash_last(randomx_vm *machine, void *output);

/*
 * Writes the commitment Blake2b-256(input || hash_in) (RANDOMX_HASH_SIZE bytes) to com_out;
 * hash_in is a RANDOMX_HASH_SIZE-byte hash of that input.
 */
RANDOMX_EXPORT void randomx_calculate_commitment(const void *input, size_t inputSize,
                                                 const void *hash_in, void *com_out);

#if defined(__cplusplus)
}
#endif

#endif /* RANDOMX_H */
