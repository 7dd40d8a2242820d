/* Sample a story from the exported story model (examples/export_story.py), limn's way.

     cc -O3 -o story story_main.c story.c -lm
     ./story story.bin CTX "Once upon a time" BYTES [TEMPERATURE TOP_K SEED]

   The step (story.h) takes a byte, its position and every layer's key and value cache, and
   gives the next byte's logits and the caches with this position written. The loop and the
   sampling rule are limn.generate's, so the same seed prints the same bytes: the prompt is
   fed one byte a step; when the cache is full, the last CTX / 2 bytes are fed again from
   position 0; a byte is drawn from the TOP_K largest logits (ties in index order) with
   weights exp((logit - max) / TEMPERATURE), summed in that order, taking the first whose
   running sum exceeds u * total, u from splitmix64. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "story.h"

static uint64_t state;

static uint64_t splitmix64(void) {
  uint64_t z = state += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int sample(const float *logits, int n, double temperature, int top_k) {
  int order[256], k = top_k > 0 && top_k < n ? top_k : n;
  for (int i = 0; i < n; i++) { /* a stable sort, largest first */
    int j = i;
    for (; j > 0 && logits[order[j - 1]] < logits[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  if (temperature <= 0) return order[0];
  double w[256], total = 0, run = 0;
  for (int j = 0; j < k; j++) {
    w[j] = exp(((double)logits[order[j]] - (double)logits[order[0]]) / temperature);
    total += w[j];
  }
  double r = (double)(splitmix64() >> 11) * 0x1.0p-53 * total;
  for (int j = 0; j < k; j++) {
    run += w[j];
    if (r < run) return order[j];
  }
  return order[k - 1];
}

static const long in_bytes[] = STORY_IN_BYTES, out_bytes[] = STORY_OUT_BYTES;
static void *in[STORY_INPUTS], *out[STORY_OUTPUTS];
static int pos, ctx;

static void step(int token) {
  *(int32_t *)in[0] = token;
  *(int32_t *)in[1] = pos++;
  if (story_run((const void *const *)in, out)) exit(3);
  for (int j = 1; j < STORY_OUTPUTS; j++) memcpy(in[j + 1], out[j], in_bytes[j + 1]);
}

static void push(const unsigned char *text, int j) { /* feed text[j], which follows text[:j] */
  if (pos == ctx) {
    pos = 0;
    for (int i = j + 1 - ctx / 2; i < j; i++) step(text[i]);
  }
  step(text[j]);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s WEIGHTS CTX PROMPT BYTES [TEMPERATURE TOP_K SEED]\n", argv[0]);
    return 1;
  }
  if (story_load(argv[1])) return 2;
  ctx = atoi(argv[2]);
  int plen = (int)strlen(argv[3]), n = atoi(argv[4]);
  double temperature = argc > 5 ? atof(argv[5]) : 1.0;
  int top_k = argc > 6 ? atoi(argv[6]) : 0;
  state = argc > 7 ? strtoull(argv[7], NULL, 10) : 0;
  for (int j = 0; j < STORY_INPUTS; j++) in[j] = calloc(1, in_bytes[j]);
  for (int j = 0; j < STORY_OUTPUTS; j++) out[j] = calloc(1, out_bytes[j]);
  unsigned char *text = malloc(plen + n + 1);
  memcpy(text, argv[3], plen);
  fwrite(text, 1, plen, stdout);
  for (int j = 0; j < plen; j++) push(text, j);
  for (int i = 0; i < n; i++) {
    text[plen + i] = (unsigned char)sample(out[0], out_bytes[0] / 4, temperature, top_k);
    putchar(text[plen + i]);
    if (i + 1 < n) push(text, plen + i);
  }
  story_free();
  return 0;
}
