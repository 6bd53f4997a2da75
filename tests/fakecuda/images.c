/* fakecuda: kernel image parsing (cubin ELF, fatbin, fatbin wrapper, PTX).
 *
 * Layouts (little-endian), as produced by tests/fakecuda/images.py:
 *   ELF64, e_machine 190 (EM_CUDA): kernels are the STT_FUNC/STB_GLOBAL symbols of .symtab; module
 *     variables the STT_OBJECT symbols of .nv.global (zeros), .nv.global.init and .nv.constant<N>
 *     (N >= 1; initial bytes), with R_CUDA_64 relocations (.rela.<section>) to other variables and to
 *     functions (code addresses: each load's code base plus FC_CODE_AT of the function symbol).
 *     The image ends at the furthest of: section header table, program header table, any section.
 *   fatbin and its wrapper: fatbin_header, fatbin_entry and fatbin_wrapper of csrc/include/format.h (the
 *     one definition of NVIDIA's layout both Foundry and this fake read). Size = header_size + fat_size.
 *     The first ELF entry is used, else the first PTX.
 *   PTX: NUL-terminated text; kernels are the names after ".entry".
 */
#include "fakecuda.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"

#define MAX_IMAGE (1ull << 30)
#define MAX_PTX (64ull << 20)

static uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static int add_name(fc_image *img, const char *s, size_t len) {
  if (len == 0) return 0;
  for (size_t i = 0; i < img->nnames; i++)
    if (strlen(img->names[i]) == len && memcmp(img->names[i], s, len) == 0) return 0;
  char **nn = realloc(img->names, (img->nnames + 1) * sizeof(*nn));
  if (!nn) return -1;
  img->names = nn;
  char *c = malloc(len + 1);
  if (!c) return -1;
  memcpy(c, s, len);
  c[len] = 0;
  img->names[img->nnames++] = c;
  return 0;
}

void fc_image_free(fc_image *img) {
  for (size_t i = 0; i < img->nnames; i++) free(img->names[i]);
  free(img->names);
  for (size_t i = 0; i < img->nvars; i++) free(img->vars[i].name);
  free(img->vars);
  free(img->relocs);
  free(img->data);
  memset(img, 0, sizeof(*img));
}

/* ------------------------------------------------------------------ ELF */
static int elf_size(const unsigned char *p, size_t limit, size_t *size) {
  if (limit && limit < sizeof(Elf64_Ehdr)) return -1;
  Elf64_Ehdr eh;
  memcpy(&eh, p, sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != 190) return -1;
  if (eh.e_shnum && eh.e_shentsize != sizeof(Elf64_Shdr)) return -1;
  if (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)) return -1;
  unsigned long long end = sizeof(Elf64_Ehdr);
  unsigned long long sh_end = eh.e_shoff + (unsigned long long)eh.e_shnum * sizeof(Elf64_Shdr);
  unsigned long long ph_end = eh.e_phoff + (unsigned long long)eh.e_phnum * sizeof(Elf64_Phdr);
  if (eh.e_shoff > MAX_IMAGE || eh.e_phoff > MAX_IMAGE) return -1;
  if (eh.e_shnum && sh_end > end) end = sh_end;
  if (eh.e_phnum && ph_end > end) end = ph_end;
  if (limit && end > limit) return -1;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, p + eh.e_shoff + i * sizeof(sh), sizeof(sh));
    if (sh.sh_type == SHT_NOBITS || sh.sh_type == SHT_NULL) continue;
    if (sh.sh_offset > MAX_IMAGE || sh.sh_size > MAX_IMAGE) return -1;
    if (sh.sh_offset + sh.sh_size > end) end = sh.sh_offset + sh.sh_size;
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, p + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_offset > MAX_IMAGE || ph.p_filesz > MAX_IMAGE) return -1;
    if (ph.p_offset + ph.p_filesz > end) end = ph.p_offset + ph.p_filesz;
  }
  if (end > MAX_IMAGE || (limit && end > limit)) return -1;
  *size = (size_t)end;
  return 0;
}

/* Whether section `sh` holds module variables: .nv.global, .nv.global.init, .nv.constant<N>, N >= 1. */
static int variable_section(const unsigned char *p, size_t size, const Elf64_Ehdr *eh, const Elf64_Shdr *sh) {
  if (eh->e_shstrndx >= eh->e_shnum) return 0;
  Elf64_Shdr names;
  memcpy(&names, p + eh->e_shoff + eh->e_shstrndx * sizeof(names), sizeof(names));
  if (names.sh_offset + names.sh_size > size || sh->sh_name >= names.sh_size) return 0;
  const char *n = (const char *)p + names.sh_offset + sh->sh_name;
  size_t len = strnlen(n, names.sh_size - sh->sh_name);
  if (len == names.sh_size - sh->sh_name) return 0;
  if (strcmp(n, ".nv.global") == 0 || strcmp(n, ".nv.global.init") == 0) return 1;
  if (strncmp(n, ".nv.constant", 12) != 0 || !n[12]) return 0;
  for (const char *d = n + 12; *d; d++)
    if (*d < '0' || *d > '9') return 0;
  return atoi(n + 12) != 0; /* bank 0 holds kernel parameters */
}

/* A variable of symbol `sym` in section `sec` (already known to be a variable section). */
static int add_var(fc_image *img, const unsigned char *p, size_t size, const char *name, size_t len,
                   const Elf64_Sym *sym, const Elf64_Shdr *sec) {
  if (sym->st_value + sym->st_size > sec->sh_size) return -1;
  if (sec->sh_type != SHT_NOBITS && sec->sh_offset + sec->sh_size > size) return -1;
  fc_var *nv = realloc(img->vars, (img->nvars + 1) * sizeof(*nv));
  if (!nv) return -1;
  img->vars = nv;
  fc_var *v = &img->vars[img->nvars];
  v->name = malloc(len + 1);
  if (!v->name) return -1;
  memcpy(v->name, name, len);
  v->name[len] = 0;
  v->size = sym->st_size;
  v->sec = sym->st_shndx;
  v->at = sym->st_value;
  v->init = sec->sh_type == SHT_NOBITS ? -1 : (long long)(p - img->data) + (long long)(sec->sh_offset + sym->st_value);
  img->nvars++;
  return 0;
}

/* Relocations (SHT_RELA) of variable sections whose target symbol is a variable or a function; `var_of[symbol
 * index]` is that variable's index + 1 (0: not a variable), `code_of[symbol index]` FC_CODE_AT of a function
 * + 1 (0: not a function). Other relocations are ignored. */
static int elf_relocs(const unsigned char *p, size_t size, const Elf64_Ehdr *eh, const size_t *var_of,
                      const unsigned long long *code_of, size_t nsyms, fc_image *img) {
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    Elf64_Shdr sh, target;
    memcpy(&sh, p + eh->e_shoff + i * sizeof(sh), sizeof(sh));
    if (sh.sh_type != SHT_RELA || sh.sh_info >= eh->e_shnum) continue;
    memcpy(&target, p + eh->e_shoff + sh.sh_info * sizeof(target), sizeof(target));
    if (!variable_section(p, size, eh, &target)) continue;
    if (sh.sh_offset + sh.sh_size > size) return -1;
    for (size_t k = 0; k + sizeof(Elf64_Rela) <= sh.sh_size; k += sizeof(Elf64_Rela)) {
      Elf64_Rela r;
      memcpy(&r, p + sh.sh_offset + k, sizeof(r));
      size_t symi = ELF64_R_SYM(r.r_info);
      if (symi >= nsyms || (!var_of[symi] && !code_of[symi]) || ELF64_R_TYPE(r.r_info) != 2 /* R_CUDA_64 */)
        continue;
      fc_reloc *nr = realloc(img->relocs, (img->nrelocs + 1) * sizeof(*nr));
      if (!nr) return -1;
      img->relocs = nr;
      img->relocs[img->nrelocs++] =
          var_of[symi] ? (fc_reloc){sh.sh_info, r.r_offset, var_of[symi] - 1, r.r_addend}
                       : (fc_reloc){sh.sh_info, r.r_offset, FC_RELOC_CODE, (long long)(code_of[symi] - 1) + r.r_addend};
    }
  }
  return 0;
}

/* p has at least size bytes (already validated by elf_size) and lies inside img->data. */
static int elf_names(const unsigned char *p, size_t size, fc_image *img) {
  Elf64_Ehdr eh;
  memcpy(&eh, p, sizeof(eh));
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh, st;
    memcpy(&sh, p + eh.e_shoff + i * sizeof(sh), sizeof(sh));
    if (sh.sh_type != SHT_SYMTAB) continue;
    if (sh.sh_link >= eh.e_shnum || sh.sh_offset + sh.sh_size > size) return -1;
    memcpy(&st, p + eh.e_shoff + sh.sh_link * sizeof(st), sizeof(st));
    if (st.sh_offset + st.sh_size > size) return -1;
    const char *strs = (const char *)p + st.sh_offset;
    size_t nsyms = sh.sh_size / sizeof(Elf64_Sym);
    size_t *var_of = calloc(nsyms ? nsyms : 1, sizeof(*var_of));
    unsigned long long *code_of = calloc(nsyms ? nsyms : 1, sizeof(*code_of));
    if (!var_of || !code_of) {
      free(var_of);
      free(code_of);
      return -1;
    }
    for (size_t k = 0; k < nsyms; k++) {
      Elf64_Sym sym;
      memcpy(&sym, p + sh.sh_offset + k * sizeof(sym), sizeof(sym));
      if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && sym.st_shndx > 0 && sym.st_shndx < eh.e_shnum)
        code_of[k] = FC_CODE_AT(sym.st_shndx, sym.st_value) + 1;
      int func = ELF64_ST_TYPE(sym.st_info) == STT_FUNC && ELF64_ST_BIND(sym.st_info) == STB_GLOBAL;
      int object = ELF64_ST_TYPE(sym.st_info) == STT_OBJECT && sym.st_shndx > 0 && sym.st_shndx < eh.e_shnum;
      if (!func && !object) continue;
      if (sym.st_name >= st.sh_size) goto bad;
      size_t len = strnlen(strs + sym.st_name, st.sh_size - sym.st_name);
      if (sym.st_name + len >= st.sh_size) goto bad; /* not terminated */
      if (func) {
        if (add_name(img, strs + sym.st_name, len)) goto bad;
        continue;
      }
      Elf64_Shdr sec;
      memcpy(&sec, p + eh.e_shoff + sym.st_shndx * sizeof(sec), sizeof(sec));
      if (!len || !sym.st_size || !variable_section(p, size, &eh, &sec)) continue;
      if (add_var(img, p, size, strs + sym.st_name, len, &sym, &sec)) goto bad;
      var_of[k] = img->nvars;
    }
    int rc = elf_relocs(p, size, &eh, var_of, code_of, nsyms, img);
    free(var_of);
    free(code_of);
    if (rc) return -1;
    continue;
  bad:
    free(var_of);
    free(code_of);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ PTX */
static int ptx_names(const char *s, size_t n, fc_image *img) {
  int has_version = 0;
  for (size_t i = 0; i + 8 <= n; i++)
    if (memcmp(s + i, ".version", 8) == 0) has_version = 1;
  size_t found = 0;
  for (size_t i = 0; i + 6 <= n; i++) {
    if (memcmp(s + i, ".entry", 6) != 0) continue;
    if (i > 0 && !(s[i - 1] == ' ' || s[i - 1] == '\t' || s[i - 1] == '\n' || s[i - 1] == '\r')) continue;
    size_t j = i + 6;
    if (j >= n || !(s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) continue;
    while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) j++;
    size_t k = j;
    while (k < n && (s[k] == '_' || s[k] == '$' || (s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'z') ||
                     (s[k] >= 'A' && s[k] <= 'Z')))
      k++;
    if (k > j) {
      if (add_name(img, s + j, k - j)) return -1;
      found++;
    }
  }
  return (has_version || found) ? 0 : -1;
}

static int looks_like_text(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n && i < 64 && p[i]; i++)
    if (!(p[i] == '\n' || p[i] == '\r' || p[i] == '\t' || (p[i] >= 0x20 && p[i] < 0x7f))) return 0;
  return n > 0 && p[0] != 0;
}

/* ------------------------------------------------------------------ fatbin */
static int fatbin_size(const unsigned char *p, size_t limit, size_t *size) {
  fatbin_header h;
  if (limit && limit < sizeof(h)) return -1;
  memcpy(&h, p, sizeof(h));
  if (h.header_size < sizeof(h) || h.fat_size > MAX_IMAGE) return -1;
  unsigned long long total = (unsigned long long)h.header_size + h.fat_size;
  if (limit && total > limit) return -1;
  *size = (size_t)total;
  return 0;
}

static int fatbin_names(const unsigned char *p, size_t size, fc_image *img) {
  fatbin_header h;
  memcpy(&h, p, sizeof(h));
  const unsigned char *elf = NULL, *ptx = NULL;
  size_t elf_n = 0, ptx_n = 0;
  const size_t head = offsetof(fatbin_entry, compressed_size); /* the fields every entry header holds */
  for (size_t off = h.header_size; off + head <= size;) {
    fatbin_entry e;
    memcpy(&e, p + off, head);
    uint32_t ehs = e.header_size;
    uint64_t psize = e.payload_size;
    if (ehs < head || psize > size || off + ehs + psize > size) return -1;
    if (e.kind == FDY_FATBIN_KIND_ELF && !elf) {
      elf = p + off + ehs;
      elf_n = psize;
    } else if (e.kind == FDY_FATBIN_KIND_PTX && !ptx) {
      ptx = p + off + ehs;
      ptx_n = psize;
    }
    off += ehs + ((psize + 7) & ~(uint64_t)7);
  }
  if (elf) {
    size_t esz;
    if (elf_n < 4 || memcmp(elf, ELFMAG, SELFMAG) != 0 || elf_size(elf, elf_n, &esz) != 0) return -1;
    return elf_names(elf, esz, img);
  }
  if (ptx) return ptx_names((const char *)ptx, strnlen((const char *)ptx, ptx_n), img);
  return -1;
}

/* ------------------------------------------------------------------ entry */
static CUresult finish(fc_image *out, const unsigned char *src, size_t size, int format, int extra_nul) {
  out->data = malloc(size + (extra_nul ? 1 : 0));
  if (!out->data) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(out->data, src, size);
  if (extra_nul) out->data[size++] = 0;
  out->size = size;
  out->format = format;
  int bad;
  if (format == FC_IMG_ELF) bad = elf_names(out->data, size, out);
  else if (format == FC_IMG_FATBIN) bad = fatbin_names(out->data, size, out);
  else bad = ptx_names((const char *)out->data, strnlen((const char *)out->data, size), out);
  if (bad) {
    fc_image_free(out);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  return CUDA_SUCCESS;
}

CUresult fc_image_parse(const void *src, size_t known, fc_image *out) {
  memset(out, 0, sizeof(*out));
  const unsigned char *p = src;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (known && known < 4) return CUDA_ERROR_INVALID_IMAGE;
  uint32_t magic = rd32(p);
  size_t size;
  if (magic == FDY_FATBIN_WRAPPER_MAGIC) {
    fatbin_wrapper w;
    if (known && known < sizeof(w)) return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&w, p, sizeof(w));
    const unsigned char *fb = (const unsigned char *)(uintptr_t)w.data;
    if (!fb || (w.version != 1 && w.version != 2) || rd32(fb) != FDY_FATBIN_MAGIC) return CUDA_ERROR_INVALID_IMAGE;
    if (fatbin_size(fb, 0, &size)) return CUDA_ERROR_INVALID_IMAGE;
    return finish(out, fb, size, FC_IMG_FATBIN, 0);
  }
  if (magic == FDY_FATBIN_MAGIC) {
    if (fatbin_size(p, known, &size)) return CUDA_ERROR_INVALID_IMAGE;
    return finish(out, p, size, FC_IMG_FATBIN, 0);
  }
  if (memcmp(p, ELFMAG, SELFMAG) == 0) {
    if (elf_size(p, known, &size)) return CUDA_ERROR_INVALID_IMAGE;
    return finish(out, p, size, FC_IMG_ELF, 0);
  }
  if (!looks_like_text(p, known ? known : 64)) return CUDA_ERROR_INVALID_IMAGE;
  if (known) {
    size = strnlen((const char *)p, known);
    return finish(out, p, size, FC_IMG_PTX, 1);
  }
  size = strnlen((const char *)p, MAX_PTX);
  if (size >= MAX_PTX) return CUDA_ERROR_INVALID_IMAGE;
  return finish(out, p, size + 1, FC_IMG_PTX, 0);
}

CUresult fc_image_read_file(const char *path, fc_image *out) {
  memset(out, 0, sizeof(*out));
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || (unsigned long long)st.st_size > MAX_IMAGE) {
    close(fd);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  size_t n = (size_t)st.st_size, got = 0;
  unsigned char *buf = malloc(n);
  if (!buf) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  while (got < n) {
    ssize_t k = read(fd, buf + got, n - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fd);
  CUresult r = got == n ? fc_image_parse(buf, n, out) : CUDA_ERROR_FILE_NOT_FOUND;
  free(buf);
  return r;
}
