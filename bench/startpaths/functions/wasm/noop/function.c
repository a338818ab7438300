/* NoOp for kiln's wasm runtime (WASI preview 1, clang + wasi-libc): reads the event, answers
 * {"statusCode": 200}. `kiln_init` is its pre-initialisation export (the wasm hot path); a NoOp
 * has nothing to set up, so it only marks that it ran. */
#include <stdio.h>

static int initialised;

__attribute__((export_name("kiln_init"))) void kiln_init(void) { initialised = 1; }

int main(void) {
    char buf[4096];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    printf("{\"statusCode\": 200, \"preinitialised\": %d}", initialised);
    return 0;
}
