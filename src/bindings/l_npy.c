/* l_npy.c — tensors to and from NumPy .npy files (format version 1.0 written,
 * 1.0–3.0 read), the exchange format of external backends (docs/peers.md,
 * "External backends"): numpy.load and torch read them as they are.
 *
 *   vsalab.npy_save(path, t) -> bytes written. Any device (copied to the
 *     host), any strides (written C-contiguous). dtypes: f32 '<f4', f64
 *     '<f8', i32 '<i4', i64 '<i8', and bf16 as its raw 16 bits, '<u2'
 *     (numpy has no bfloat16: torch.from_numpy(a).view(torch.bfloat16)).
 *   vsalab.npy_load(path [, {dtype=, shape=, device='cpu'}]) -> tensor.
 *     '<u2' reads as bf16; '<f2' (float16) is refused. With dtype, the
 *     data are converted to it (f32 -> bf16 rounds to nearest even); with
 *     shape, a different shape is an error naming the file. Fortran order,
 *     big-endian data, a truncated file or a bad header raise naming path.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "l_args.h"
#include "l_tensor.h"
#include "lua_api.h"

static const char *
descr_of(vsa_dtype dt)
{
  switch (dt) {
  case VSA_BF16: return "<u2";
  case VSA_F32: return "<f4";
  case VSA_F64: return "<f8";
  case VSA_I32: return "<i4";
  case VSA_I64: return "<i8";
  default: return NULL;
  }
}

static int
l_npy_save(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  vsa_tensor *t = vsa_lua_checktensor(L, 2);
  /* A contiguous host copy (the tensor itself when it already is one). */
  vsa_tensor *h = t;
  if (t->device != VSA_CPU || !vsa_tensor_is_contiguous(t)) {
    h = vsa_lua_newtensor(L, t->dtype, VSA_CPU, t->ndim, t->shape);
    if (vsa_tensor_copy(h, t) != 0) return vsa_lua_raise(L);
  }
  char shape[256] = "";
  size_t n = 0;
  for (int d = 0; d < t->ndim; d++)
    n += snprintf(shape + n, sizeof shape - n, "%lld,%s", (long long)t->shape[d],
                  d + 1 < t->ndim ? " " : "");
  if (t->ndim > 1) shape[n - 1] = 0; /* (a, b) but (a,) */
  char header[512];
  int len = snprintf(header, sizeof header,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     descr_of(t->dtype), shape);
  /* Pad with spaces so magic + 2 + 2 + header + '\n' is a multiple of 64. */
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) return vsa_lua_errorf(L, "npy_save: cannot write '%s'", path);
  unsigned short hl = (unsigned short)(len + pad + 1);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                           (unsigned char)(hl >> 8)};
  size_t bytes = (size_t)vsa_tensor_numel(h) * vsa_dtype_size(h->dtype);
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, len, f) == (size_t)len;
  for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && (bytes == 0 || fwrite(vsa_tensor_data(h), 1, bytes, f) == bytes);
  ok = (fclose(f) == 0) && ok;
  if (!ok) return vsa_lua_errorf(L, "npy_save: writing '%s' failed (disk full?)", path);
  lua_pushnumber(L, (lua_Number)(bytes + total + pad));
  return 1;
}

/* The value text after 'key': in a .npy header dict, or NULL. */
static const char *
field(const char *hdr, const char *key)
{
  char k[32];
  snprintf(k, sizeof k, "'%s':", key);
  const char *p = strstr(hdr, k);
  if (!p) return NULL;
  p += strlen(k);
  while (*p == ' ') p++;
  return p;
}

/* The open file of npy_load, owned by the Lua stack: a raise (an
 * allocation the header asks for that fails, a bad option) closes it at
 * collection instead of leaking a descriptor per call. */
typedef struct {
  FILE *f;
} npy_file;

static void
npy_file_close(npy_file *g)
{
  if (g->f) fclose(g->f);
  g->f = NULL;
}

static int
npy_file_gc(lua_State *L)
{
  npy_file_close(lua_touserdata(L, 1));
  return 0;
}

static int
l_npy_load(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  static const char *const keys[] = {"dtype", "shape", "device", NULL};
  vsa_arg_check_keys(L, 2, "npy_load", keys);
  /* A regular file only: opening a FIFO (or a device) a peer left in its
   * place would block or never end; O_NONBLOCK makes the open return. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return vsa_lua_errorf(L, "npy_load: no file '%s'", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return vsa_lua_errorf(L, "npy_load: '%s' is not a regular file", path);
  }
  npy_file *g = lua_newuserdata(L, sizeof *g);
  g->f = NULL;
  if (luaL_newmetatable(L, "vsa.NpyFile")) {
    lua_pushcfunction(L, npy_file_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  FILE *f = g->f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return vsa_lua_errorf(L, "npy_load: cannot read '%s'", path);
  }
  unsigned char pre[12];
  if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s' is not a .npy file", path);
  }
  size_t hl;
  if (pre[6] == 1) {
    if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
    hl = pre[8] | (size_t)pre[9] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 8, 1, 4, f) != 4) goto truncated;
    hl = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s': unknown .npy version %d", path, pre[6]);
  }
  if (hl > 65536) {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s': header of %zu bytes", path, hl);
  }
  char hdr[65537];
  if (fread(hdr, 1, hl, f) != hl) goto truncated;
  hdr[hl] = 0;
  const char *d = field(hdr, "descr"), *fo = field(hdr, "fortran_order"), *sh = field(hdr, "shape");
  if (!d || !fo || !sh) {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s': bad header %s", path, hdr);
  }
  if (strncmp(fo, "False", 5) != 0) {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s' is in Fortran order (save a C-contiguous array)", path);
  }
  vsa_dtype dt;
  static const struct { const char *descr; vsa_dtype dt; } known[] = {
      {"'<u2'", VSA_BF16}, {"'<f4'", VSA_F32}, {"'<f8'", VSA_F64}, {"'<i4'", VSA_I32},
      {"'<i8'", VSA_I64}, {"'|u2'", VSA_BF16}};
  size_t i;
  for (i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strncmp(d, known[i].descr, strlen(known[i].descr)) == 0) break;
  if (i == sizeof known / sizeof known[0]) {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s': dtype %.12s not taken (little-endian u2 = bf16 "
                             "bits, f4, f8, i4, i8)", path, d);
  }
  dt = known[i].dt;
  int64_t shape[VSA_MAX_DIMS];
  int nd = 0;
  const char *p = sh;
  if (*p++ != '(') {
    npy_file_close(g);
    return vsa_lua_errorf(L, "npy_load: '%s': bad shape in header", path);
  }
  while (*p && *p != ')') {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || nd >= VSA_MAX_DIMS) {
      npy_file_close(g);
      return vsa_lua_errorf(L, "npy_load: '%s': bad shape in header (rank at most %d)", path,
                            VSA_MAX_DIMS);
    }
    shape[nd++] = v;
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  if (nd == 0) shape[nd++] = 1; /* a scalar as [1] */
  /* The shape asked for, before the header's is allocated: a peer's
   * header may claim terabytes (that read "out of host memory"). */
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "shape");
    if (lua_istable(L, -1)) {
      int want_n = (int)lua_objlen(L, -1), ok = want_n == nd;
      int64_t want[VSA_MAX_DIMS];
      for (int k = 0; k < want_n && k < VSA_MAX_DIMS; k++) {
        lua_rawgeti(L, -1, k + 1);
        want[k] = (int64_t)lua_tonumber(L, -1);
        lua_pop(L, 1);
        ok = ok && want[k] == shape[k];
      }
      if (!ok) {
        npy_file_close(g);
        char a[128], b[128];
        vsa_arg_fmt_shape(want, want_n < VSA_MAX_DIMS ? want_n : VSA_MAX_DIMS, a, sizeof a);
        vsa_arg_fmt_shape(shape, nd, b, sizeof b);
        return vsa_lua_errorf(L, "%s: expected shape %s, got %s", path, a, b);
      }
    }
    lua_pop(L, 1);
  }
  vsa_tensor *h = vsa_lua_newtensor(L, dt, VSA_CPU, nd, shape);
  int hidx = lua_gettop(L);
  size_t bytes = (size_t)vsa_tensor_numel(h) * vsa_dtype_size(dt);
  if (bytes && fread(vsa_tensor_data(h), 1, bytes, f) != bytes) goto truncated;
  npy_file_close(g);
  int dev = VSA_CPU;
  if (lua_istable(L, 2)) { /* the shape asked for was checked above */
    lua_getfield(L, 2, "dtype");
    if (!lua_isnil(L, -1)) {
      vsa_dtype want;
      if (!lua_isstring(L, -1) || vsa_dtype_parse(lua_tostring(L, -1), &want) != 0)
        return vsa_lua_errorf(L, "npy_load: field 'dtype' must be bf16, f32, f64, i32 or i64");
      lua_pop(L, 1);
      if (want != dt) {
        vsa_tensor *c = vsa_lua_newtensor(L, want, VSA_CPU, nd, shape);
        if (vsa_tensor_convert(c, h) != 0) return vsa_lua_raise(L);
        lua_replace(L, hidx);
      }
    } else {
      lua_pop(L, 1);
    }
    dev = vsa_arg_field_device(L, 2);
  }
  vsa_arg_push_on_device(L, hidx, dev);
  return 1;
truncated:
  npy_file_close(g);
  return vsa_lua_errorf(L, "npy_load: '%s' is truncated", path);
}

/* vsalab.read_regular(path, max [, tail]) -> the text of a regular file,
 * or nil and why. What an external peer leaves behind is read this way: a
 * FIFO in a file's place would block the open forever (a signal is not
 * noticed inside it), and a log of gigabytes would be read whole. At most
 * max bytes: the last max with tail, else a longer file is refused. */
static int
l_read_regular(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  lua_Number maxn = luaL_checknumber(L, 2);
  int tail = lua_toboolean(L, 3);
  luaL_argcheck(L, maxn >= 0 && maxn <= 1 << 30, 2, "max must be in [0, 2^30]");
  size_t max = (size_t)maxn;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "no file '%s'", path);
    return 2;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    lua_pushnil(L);
    lua_pushfstring(L, "'%s' is not a regular file", path);
    return 2;
  }
  size_t size = (size_t)st.st_size, want = size;
  off_t from = 0;
  if (size > max) {
    if (!tail) {
      close(fd);
      lua_pushnil(L);
      lua_pushfstring(L, "'%s' is over %d bytes", path, (int)max);
      return 2;
    }
    from = (off_t)(size - max);
    want = max;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char chunk[8192];
  size_t got = 0;
  while (got < want) {
    size_t n = want - got < sizeof chunk ? want - got : sizeof chunk;
    ssize_t r = pread(fd, chunk, n, from + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    luaL_addlstring(&b, chunk, (size_t)r);
    got += (size_t)r;
  }
  close(fd);
  luaL_pushresult(&b);
  return 1;
}

static const luaL_Reg functions[] = {
    {"npy_save", l_npy_save}, {"npy_load", l_npy_load}, {"read_regular", l_read_regular},
    {NULL, NULL}};

void
vsa_lua_open_npy(lua_State *L)
{
  luaL_register(L, NULL, functions);
}
