/*
 * dlpack.h - the DLPack structures that ferry.Buffer.__dlpack__ hands out, written from the
 * DLPack specification: the ABI of DLPack v0.8, the 0.x ABI (a DLManagedTensor in a capsule
 * named "dltensor"; its layout is the same through the 0.x releases), which NumPy >= 1.22 and
 * PyTorch >= 1.10 read. DLPack 1.0's versioned tensor ("dltensor_versioned") is not made.
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

#endif
