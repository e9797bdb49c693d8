/*
 * A program written for the Debian librandomx-dev header (/usr/include/randomx.h, RandomX
 * 1.1.10) and linked against Debian's librandomx.so.0. tests/dropin.rs runs it once as built
 * and once with LD_LIBRARY_PATH pointing at proofkit's library, and requires the same output.
 * Only behaviour both libraries define is printed (no JIT timings, no NULL-argument misuse).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fenv.h>
#include <stdio.h>
#include <string.h>

#include <randomx.h>

static void put_hex(const char *label, const unsigned char *b, size_t n) {
  printf("%s ", label);
  for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
  printf("\n");
}

int main(void) {
  unsigned char key100[100], input300[300], out[32];
  for (int i = 0; i < 100; i++) key100[i] = (unsigned char)(7 * i + 3);
  for (int i = 0; i < 300; i++) input300[i] = (unsigned char)(i ^ 0x5a);
  struct { const void *p; size_t n; } keys[] = {
      {"test key 000", 12}, {key100, 100}, {"", 0}, {key100, 61}};
  struct { const void *p; size_t n; } inputs[] = {
      {"This is a test", 14}, {"", 0}, {input300, 300}};

  Dl_info info;
  if (!dladdr((void *)&randomx_get_flags, &info) || !info.dli_fname) return 3;
  printf("lib %s\n", info.dli_fname);
  randomx_flags flags = randomx_get_flags();
  printf("flags %d\n", (int)flags);
  printf("item_count %lu\n", randomx_dataset_item_count());

  randomx_cache *large = randomx_alloc_cache(RANDOMX_FLAG_LARGE_PAGES);
  printf("large_pages_cache_null %d\n", large == NULL);
  if (large) randomx_release_cache(large);

  randomx_cache *cache = randomx_alloc_cache(flags);
  if (!cache) { printf("alloc_cache failed\n"); return 1; }
  randomx_init_cache(cache, keys[0].p, keys[0].n);
  randomx_vm *large_vm = randomx_create_vm(RANDOMX_FLAG_LARGE_PAGES, cache, NULL);
  printf("large_pages_vm_null %d\n", large_vm == NULL);
  if (large_vm) randomx_destroy_vm(large_vm);

  /* The recommended flags and the portable default must give the same hashes. */
  randomx_vm *fast = randomx_create_vm(flags, cache, NULL);
  randomx_vm *slow = randomx_create_vm(RANDOMX_FLAG_DEFAULT, cache, NULL);
  if (!fast || !slow) { printf("create_vm failed\n"); return 1; }
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    randomx_init_cache(cache, keys[k].p, keys[k].n);
    randomx_vm_set_cache(fast, cache);
    randomx_vm_set_cache(slow, cache);
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
      char label[64];
      snprintf(label, sizeof label, "hash k%zu i%zu", k, i);
      randomx_calculate_hash(k % 2 ? slow : fast, inputs[i].p, inputs[i].n, out);
      put_hex(label, out, 32);
    }
  }
  /* Batch API, and the rounding mode around a hash. */
  randomx_calculate_hash_first(fast, inputs[0].p, inputs[0].n);
  randomx_calculate_hash_next(fast, inputs[2].p, inputs[2].n, out);
  put_hex("batch 0", out, 32);
  randomx_calculate_hash_last(fast, out);
  put_hex("batch 1", out, 32);
  fesetround(FE_DOWNWARD);
  randomx_calculate_hash(slow, input300, 77, out);
  int kept = fegetround() == FE_DOWNWARD;
  fesetround(FE_TONEAREST);
  put_hex("rounding", out, 32);
  printf("rounding_kept %d\n", kept);

  /* A few dataset items, through each path of randomx_init_dataset. */
  randomx_dataset *ds = randomx_alloc_dataset(RANDOMX_FLAG_DEFAULT);
  if (!ds) { printf("alloc_dataset failed\n"); return 1; }
  unsigned long n = randomx_dataset_item_count();
  unsigned long ranges[][2] = {{0, 5}, {4096, 4}, {777777, 2}, {n - 1, 1}, {n - 9, 7}};
  const unsigned char *mem = randomx_get_dataset_memory(ds);
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    randomx_init_dataset(ds, cache, ranges[r][0], ranges[r][1]);
    char label[64];
    snprintf(label, sizeof label, "items %lu+%lu", ranges[r][0], ranges[r][1]);
    put_hex(label, mem + ranges[r][0] * RANDOMX_DATASET_ITEM_SIZE,
            ranges[r][1] * RANDOMX_DATASET_ITEM_SIZE);
  }
  randomx_release_dataset(ds);
  randomx_destroy_vm(fast);
  randomx_destroy_vm(slow);
  randomx_release_cache(cache);
  return 0;
}
