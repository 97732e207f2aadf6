/*
 * dlpack.h - the DLPack structures that ferry.Buffer.__dlpack__ hands out, written from the
 * DLPack specification: the 0.x ABI (a DLManagedTensor in a capsule named "dltensor"; its layout
 * is the same through the 0.x releases), which NumPy >= 1.22 and PyTorch >= 1.10 read, and
 * DLPack 1.0's versioned tensor (a DLManagedTensorVersioned in a "dltensor_versioned" capsule),
 * which consumers that pass max_version >= (1, 0) read, and whose flags say read-only.
 *
 * Only what a 1-D tensor of bytes in host memory needs is named here. The names are the
 * specification's; no other DLPack header is included with this one.
 */
#ifndef PYF_DLPACK_H
#define PYF_DLPACK_H

#include <stdint.h>

/* The capsule's name as the producer returns it, and the name the consumer gives it once it
 * took the tensor over: from then on the consumer calls the deleter, the capsule no longer. */
#define DLPACK_CAPSULE_NAME "dltensor"
#define DLPACK_CAPSULE_USED_NAME "used_dltensor"
#define DLPACK_VERSIONED_NAME "dltensor_versioned"
#define DLPACK_VERSIONED_USED_NAME "used_dltensor_versioned"

/* DLManagedTensorVersioned.flags: the consumer must not write the tensor; the tensor is a copy
 * made for the consumer alone. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ull << 1)

enum { kDLCPU = 1 };  /* DLDeviceType: memory the host reads directly */
enum { kDLUInt = 1 }; /* DLDataTypeCode: unsigned integers */

typedef struct {
    int32_t device_type; /* a DLDeviceType */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code; /* a DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;   /* ndim sizes */
    int64_t *strides; /* ndim strides in elements, not bytes; NULL: compact and row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx; /* the producer's */
    /* Called once, by the tensor's last owner, to free it and let go of what it holds. */
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version; /* of the ABI the producer wrote: 1.0 here */
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags; /* DLPACK_FLAG_BITMASK_* */
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif
