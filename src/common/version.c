/*
 * version.c - the version of ferry (libferry, ferryd and the tools are released together), set
 * by the build from the project's version (CMakeLists.txt).
 */
#include "ferry.h"

#ifndef FERRY_VERSION_STRING
#error "FERRY_VERSION_STRING comes from the build (CMakeLists.txt)"
#endif

const char *ferry_version(void)
{
    return FERRY_VERSION_STRING;
}
