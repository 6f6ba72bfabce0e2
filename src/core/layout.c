/* layout.c — the names of the token layouts (bsa.h, vsa_layout). */
#include <string.h>

#include "bsa.h"

static const char *const layout_names[vsa_n_layouts] = {"bhsd", "bshd"};

const char *
vsa_layout_name(int layout)
{
  return layout >= 0 && layout < vsa_n_layouts ? layout_names[layout] : NULL;
}

int
vsa_layout_parse(const char *name)
{
  for (int i = 0; i < vsa_n_layouts; i++)
    if (name && strcmp(name, layout_names[i]) == 0) return i;
  return -1;
}
