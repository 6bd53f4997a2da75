/* Kernel images as the driver receives them: a pointer and no size. The size comes from the image's
 * own headers, and the archive stores exactly that many bytes: a size too large would store whatever
 * memory follows the image, one too small a truncated image. So every format is parsed strictly and
 * anything unrecognised is reported, not guessed. */
#include <string.h>

#include "internal.h"

#define MAX_IMAGE_BYTES (16ULL << 30)

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int fatbin_size(const uint8_t *p, uint64_t *size) {
  fatbin_header h;
  memcpy(&h, p, sizeof(h));
  if (h.header_size < sizeof(h) || h.header_size > 4096 || h.fat_size > MAX_IMAGE_BYTES) return -1;
  *size = h.header_size + h.fat_size;
  return 0;
}

/* The end of an ELF64 file is the furthest of: section header table, program header table, and the
 * file contents of every section and segment. nvcc places the section headers last, but only the
 * maximum is safe. */
static int elf_size(const uint8_t *p, uint64_t *size) {
  if (p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* little endian */) return -1;
  uint64_t phoff = rd64(p + 0x20), shoff = rd64(p + 0x28);
  uint16_t phentsize = rd16(p + 0x36), phnum = rd16(p + 0x38), shentsize = rd16(p + 0x3A), shnum = rd16(p + 0x3C);
  if ((shnum && shentsize < 64) || (phnum && phentsize < 56) || shoff > MAX_IMAGE_BYTES || phoff > MAX_IMAGE_BYTES)
    return -1;
  uint64_t end = 64;
  if (shnum && shoff + (uint64_t)shnum * shentsize > end) end = shoff + (uint64_t)shnum * shentsize;
  if (phnum && phoff + (uint64_t)phnum * phentsize > end) end = phoff + (uint64_t)phnum * phentsize;
  for (uint16_t i = 0; i < shnum; i++) {
    const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
    uint32_t type = rd32(sh + 4);
    uint64_t off = rd64(sh + 0x18), sz = rd64(sh + 0x20);
    if (type == 8 /* SHT_NOBITS */ || type == 0) continue;
    if (off > MAX_IMAGE_BYTES || sz > MAX_IMAGE_BYTES) return -1;
    if (off + sz > end) end = off + sz;
  }
  for (uint16_t i = 0; i < phnum; i++) {
    const uint8_t *ph = p + phoff + (uint64_t)i * phentsize;
    uint64_t off = rd64(ph + 0x08), filesz = rd64(ph + 0x20);
    if (off > MAX_IMAGE_BYTES || filesz > MAX_IMAGE_BYTES) return -1;
    if (off + filesz > end) end = off + filesz;
  }
  *size = end;
  return 0;
}

/* PTX is NUL-terminated text; the NUL belongs to the image (the driver needs it). */
static int ptx_size(const uint8_t *p, uint64_t *size) {
  size_t n = strlen((const char *)p);
  if (n == 0 || (uint64_t)n > MAX_IMAGE_BYTES) return -1;
  for (size_t i = 0; i < n && i < 256; i++) {
    uint8_t c = p[i];
    if (c < 0x09 || (c > 0x0D && c < 0x20) || c > 0x7E) return -1;
  }
  *size = n + 1;
  return 0;
}

int fdy_image_probe(const void *image, const void **data, uint64_t *size, uint32_t *format) {
  const uint8_t *p = image;
  if (!p) return FDY_ERR_INVALID;
  if (rd32(p) == FDY_FATBIN_WRAPPER_MAGIC) {
    fatbin_wrapper w;
    memcpy(&w, p, sizeof(w));
    const uint8_t *inner = (const uint8_t *)(uintptr_t)w.data;
    if (!inner || rd32(inner) != FDY_FATBIN_MAGIC)
      return fdy_fail(FDY_ERR_UNSUPPORTED, "fatbin wrapper at %p does not point at a fatbin", image);
    p = inner;
  }
  int rc;
  if (rd32(p) == FDY_FATBIN_MAGIC) {
    *format = FDY_IMG_FORMAT_FATBIN;
    rc = fatbin_size(p, size);
  } else if (memcmp(p, "\x7f" "ELF", 4) == 0) {
    *format = FDY_IMG_FORMAT_ELF;
    rc = elf_size(p, size);
  } else {
    *format = FDY_IMG_FORMAT_PTX;
    rc = ptx_size(p, size);
  }
  if (rc != 0) {
    *format = FDY_IMG_FORMAT_UNKNOWN;
    return fdy_fail(FDY_ERR_UNSUPPORTED, "kernel image at %p has an unknown or inconsistent format (first bytes "
                                         "%02x %02x %02x %02x); its size cannot be determined",
                    image, p[0], p[1], p[2], p[3]);
  }
  *data = p;
  return 0;
}
