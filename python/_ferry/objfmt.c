/* objfmt.c - the put_object layout (format in objfmt.h). */
#include "objfmt.h"

#include <string.h>

static const char magic[8] = {'F', 'E', 'R', 'R', 'Y', 'P', 'K', '5'};
#define HEADER_FIXED 16u
#define PART_SIZE 16u

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

size_t objfmt_header_size(size_t n)
{
    return HEADER_FIXED + n * PART_SIZE;
}

int objfmt_layout(struct objfmt_part *parts, size_t n, uint64_t *data_size)
{
    uint64_t end = 0;

    if (n == 0 || n > OBJFMT_MAX_PARTS)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t at = (end + OBJFMT_ALIGN - 1) / OBJFMT_ALIGN * OBJFMT_ALIGN;
        if (at < end || parts[i].length > UINT64_MAX - at)
            return -1;
        parts[i].offset = at;
        end = at + parts[i].length;
    }
    *data_size = end;
    return 0;
}

void objfmt_encode(const struct objfmt_part *parts, size_t n, uint8_t *out)
{
    memcpy(out, magic, sizeof(magic));
    put_u32(out + 8, OBJFMT_VERSION);
    put_u32(out + 12, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        put_u64(out + HEADER_FIXED + i * PART_SIZE, parts[i].offset);
        put_u64(out + HEADER_FIXED + i * PART_SIZE + 8, parts[i].length);
    }
}

struct objfmt_part objfmt_part_at(const uint8_t *meta, size_t i)
{
    const uint8_t *p = meta + HEADER_FIXED + i * PART_SIZE;
    return (struct objfmt_part){get_u64(p), get_u64(p + 8)};
}

static int refuse(const char **why, const char *reason)
{
    if (why)
        *why = reason;
    return -1;
}

int objfmt_check(const uint8_t *meta, size_t len, uint64_t data_size, size_t *n, const char **why)
{
    uint64_t end = 0;
    uint32_t count;

    if (len < HEADER_FIXED || memcmp(meta, magic, sizeof(magic)) != 0)
        return refuse(why, "no put_object header in its metadata");
    if (get_u32(meta + 8) != OBJFMT_VERSION)
        return refuse(why, "put_object format of another version");
    count = get_u32(meta + 12);
    if (count == 0 || count > OBJFMT_MAX_PARTS || len != objfmt_header_size(count))
        return refuse(why, "put_object header of the wrong length");
    for (uint32_t i = 0; i < count; i++) {
        struct objfmt_part p = objfmt_part_at(meta, i);
        if (p.offset < end || p.offset > data_size || p.length > data_size - p.offset)
            return refuse(why, "put_object part outside the data or out of order");
        end = p.offset + p.length;
    }
    *n = count;
    return 0;
}
