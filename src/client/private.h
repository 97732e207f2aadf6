/*
 * private.h - libferry's calls for the Python module, which links libferry statically: not in
 * ferry.h, and not exported by libferry.so (libferry.map exports ferry_* alone: it_abi checks
 * that this name stays out), no ABI promise.
 */
#ifndef FERRY_CLIENT_PRIVATE_H
#define FERRY_CLIENT_PRIVATE_H

#include <ferry.h>

/* ferry_create for a caller that fills the object with its own copy and hands nothing out of
 * *copy_to: the bytes go through libferry's private writable mapping (client.h, copy_base),
 * which costs no protection change, and *readable is the same object in the read-only view,
 * which is what may be handed out. The caller seals or aborts it as any created object. */
int client_create_for_copy(ferry_client *c, const ferry_id *id, uint64_t data_size,
                          const void *metadata, uint64_t metadata_size, uint8_t **copy_to,
                          const uint8_t **readable);

#endif
