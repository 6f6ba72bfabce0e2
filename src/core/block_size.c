/* block_size.c — the block sizes vsalab supports: the one list.
 *
 * A block is `block` consecutive tokens, for q blocks and kv blocks alike.
 * 64 is FastVideo's original VSA block (4×4×4 latent tiles); 128 is VSA-128
 * (FastVideo's 128-token tiles, cuDNN's block-sparse attention). Every
 * builder, reference, the oracle and the Lua side (vsalab.block_sizes())
 * read this list, so a new size (256) is one more entry here and in
 * VSA_BLOCK_MAX.
 */
#include <stdio.h>

#include "bsa.h"
#include "check.h"

/* Each size with its default tile of the video latent (t, h, w), whose
 * volume is the size. 64: FastVideo's VSA_TILE_SIZE (4, 4, 4). 128: the
 * (2, 8, 8) tile of FastVideo's VSA-128 tests
 * (fastvideo-kernel/tests/test_vsa128_backward.py, _BLOCK_SIZE_3D, at
 * hao-ai-lab/FastVideo 2f3d4074064e4d86f99dc784ebbaa296e6f5925f): two
 * frames of 8×8 cells. */
const vsa_block_size_info vsa_block_table[] = {
    {64, {4, 4, 4}},
    {128, {2, 8, 8}},
};
const int vsa_n_block_sizes = (int)(sizeof vsa_block_table / sizeof vsa_block_table[0]);


int
vsa_block_supported(int block)
{
  return vsa_block_info(block) != NULL;
}

const vsa_block_size_info *
vsa_block_info(int block)
{
  for (int i = 0; i < vsa_n_block_sizes; i++)
    if (vsa_block_table[i].block == block) return &vsa_block_table[i];
  return NULL;
}

const char *
vsa_block_sizes_text(void)
{
  static char text[64];
  if (!text[0]) {
    int at = 0;
    for (int i = 0; i < vsa_n_block_sizes && at < (int)sizeof text; i++)
      at += snprintf(text + at, sizeof text - (size_t)at, "%s%d", i ? ", " : "",
                     vsa_block_table[i].block);
  }
  return text;
}

int
vsa_block_check(int block, const char *what)
{
  if (vsa_block_supported(block)) return 0;
  return vsa_fail("%s: block size %d is not supported (supported: %s)", what, block,
                  vsa_block_sizes_text());
}
