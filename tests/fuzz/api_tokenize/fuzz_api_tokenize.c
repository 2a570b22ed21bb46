/*
 * fuzz_api_tokenize.c - fuzz target for the bodies of POST /tokenize and
 * /detokenize (api_tokenize_decode, api_detokenize_decode): any bytes from
 * the network decode or fail with ERR_INVALID naming a field, never a crash.
 *
 * Every input goes through both decoders. Checks (abort on failure): an
 * error has a message and a field; a decoded /tokenize body has exactly one
 * of text and messages; decoded ids are inside the vocabulary.
 */
#include "api/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_VOCAB = 1000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct api_tokenize t;
    struct err_msg m = {{0}};
    int rc = api_tokenize_decode((const char *)data, size, &t, &m);
    if (rc != 0 && (rc != ERR_INVALID || !m.text[0] || !t.bad_param[0])) abort();
    if (rc == 0 && !t.text == !t.messages) abort();
    if (rc == 0 && t.messages && !json_is_array(t.messages)) abort();
    api_tokenize_release(&t);
    memset(&m, 0, sizeof(m));
    rc = api_detokenize_decode((const char *)data, size, N_VOCAB, &t, &m);
    if (rc != 0 && (rc != ERR_INVALID || !m.text[0] || !t.bad_param[0])) abort();
    for (size_t i = 0; rc == 0 && i < t.ids.n; i++)
        if (t.ids.v[i] < 0 || t.ids.v[i] >= N_VOCAB) abort();
    api_tokenize_release(&t);
    return 0;
}
