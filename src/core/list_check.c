/* list_check.c — one wording for block-list validation failures.
 *
 * The CPU inversion, the GPU inversion's launcher and the Lua bindings all
 * report a bad list through vsa_list_error_format, so a test can match the
 * same text whichever side found the fault.
 */
#include <stdio.h>
#include <string.h>

#include "bsa.h"

// ----------------------------------------------------------------------------
// Formatting

/* The entries of a q-block row are kv blocks and the other way round; any
 * other row kind gets the neutral word. */
static const char *
item_name(const char *row_name)
{
  if (strcmp(row_name, "q block") == 0) return "kv block";
  if (strcmp(row_name, "kv block") == 0) return "q block";
  return "index";
}

void
vsa_list_error_format(const vsa_list_error *e, const char *what,
                      const char *row_name, int range, char *buf, int buflen)
{
  if (!buf || buflen <= 0) return;
  if (!what) what = "list";
  if (!row_name) row_name = "row";

  /* h = -1 means "b holds b*H + h": the CPU inversion sees only BH. */
  char where[96];
  if (e->h < 0)
    snprintf(where, sizeof where, "(bh=%d, %s=%d)", (int)e->b, row_name,
             (int)e->row);
  else
    snprintf(where, sizeof where, "(b=%d, h=%d, %s=%d)", (int)e->b,
             (int)e->h, row_name, (int)e->row);

  switch (e->code) {
  case VSA_LIST_OK:
    snprintf(buf, (size_t)buflen, "%s: no error", what);
    break;
  case VSA_LIST_INDEX_RANGE:
    snprintf(buf, (size_t)buflen, "%s: index %d out of range [0, %d) at %s",
             what, (int)e->value, range, where);
    break;
  case VSA_LIST_COUNT_RANGE:
    snprintf(buf, (size_t)buflen, "%s: count %d out of range [0, %d] at %s",
             what, (int)e->value, range, where);
    break;
  case VSA_LIST_REPEATED:
    snprintf(buf, (size_t)buflen, "%s: %s %d repeated at %s", what,
             item_name(row_name), (int)e->value, where);
    break;
  default:
    snprintf(buf, (size_t)buflen, "%s: unknown list error code %d at %s",
             what, (int)e->code, where);
    break;
  }
}
