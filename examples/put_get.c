/* put_get.c - the README's C example, whole: stores a buffer under a name, reads it back in
 * place and says where it lies. Build: cc put_get.c $(pkg-config --cflags --libs ferry), or
 * `make` builds it as build/bin/example_put_get. Run with a ferryd on the default socket (or
 * FERRY_SOCKET set). */
#include <ferry.h>
#include <stdio.h>
#include <string.h>

/* Prints what failed, with the library's reason, and gives the exit status. */
static int failed(const char *what, int rc)
{
    fprintf(stderr, "put_get: %s: %s (%s)\n", what, ferry_strerror(rc), ferry_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "hello";
    static const char text[] = "hello from C, read in place";
    ferry_client *c;
    ferry_buffer view;
    ferry_id id;
    int rc;

    if ((rc = ferry_connect(NULL, &c)) < 0)
        return failed("connect", rc);
    if ((rc = ferry_id_parse(name, &id)) < 0 ||
        (rc = ferry_put(c, &id, text, sizeof(text), NULL, 0)) < 0 ||
        (rc = ferry_get(c, &id, 1, 1000, &view)) < 0) {
        ferry_disconnect(c);
        return failed(name, rc);
    }
    printf("%s: %llu bytes at %p in the arena: %s\n", name, (unsigned long long)view.data_size,
           (const void *)view.data, (const char *)view.data);
    rc = memcmp(view.data, text, sizeof(text)) == 0 ? 0 : 1;
    ferry_release(c, &id);
    ferry_disconnect(c);
    return rc;
}
