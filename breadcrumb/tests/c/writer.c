/* A C worker writing breadcrumbs through include/wedge_breadcrumb.h (built and run by c_abi.rs).
 * usage: writer PATH   (opens PATH)  |  writer --env (opens from WEDGE_CAPTURE_RING*) */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wedge_breadcrumb.h"

static void *uploader(void *arg) {
    unsigned thread = (unsigned)(unsigned long)arg;
    for (uint32_t chunk = 0; chunk < 100; chunk++) {
        wb_args args;
        memset(&args, 0, sizeof args);
        args.bytes = 1u << 20;
        args.ptr = 0x7f0000000000ull + chunk;
        args.ptr2 = 0x1000 * (thread + 1);
        args.chunk = chunk;
        args.chunk_count = 100;
        uint64_t token = wedge_breadcrumb_enter(WB_CALL_cuMemcpyHtoDAsync_v2, &args, "c thread");
        if (token == WB_TOKEN_NONE) return (void *)1;
        wedge_breadcrumb_exit(token, 0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 64;
    if (wedge_breadcrumb_enter(WB_CALL_cuInit, NULL, "before open") != WB_TOKEN_NONE) return 10;
    if (wedge_breadcrumb_set_status("x") != -1) return 11;
    int opened = strcmp(argv[1], "--env") == 0 ? wedge_breadcrumb_open_from_env() : wedge_breadcrumb_open(argv[1]);
    if (opened != 0) { fprintf(stderr, "open failed: %d\n", opened); return 12; }
    if (wedge_breadcrumb_open(argv[1]) != 1) return 13;
    if (!wedge_breadcrumb_is_open()) return 14;

    wedge_breadcrumb_exit(wedge_breadcrumb_enter(WB_CALL_cuInit, NULL, NULL), 0);
    pthread_t threads[2];
    for (unsigned long i = 0; i < 2; i++) pthread_create(&threads[i], NULL, uploader, (void *)i);
    for (int i = 0; i < 2; i++) {
        void *failed = NULL;
        pthread_join(threads[i], &failed);
        if (failed) return 15;
    }
    wedge_breadcrumb_set_status_code(-7, "cupti: subscribe failed (demo)");

    wb_args stuck;
    memset(&stuck, 0, sizeof stuck);
    stuck.bytes = 64ull << 20;
    stuck.ptr = 0xdead0000;
    stuck.stream = 0x77;
    stuck.tensor_first = 5;
    stuck.tensor_count = 2;
    /* Label longer than 40 bytes, with a 2-byte character straddling the cut. */
    wedge_breadcrumb_enter(WB_CALL_cuStreamSynchronize, &stuck, "sync after bulkUpload of 53 chunks \xc3\xa9\xc3\xa9\xc3\xa9");
    /* Exit without the matching exit: the call stays in flight in the file. */
    printf("%d\n", (int)getpid());
    return 0;
}
