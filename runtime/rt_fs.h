/*
 * rt_fs.h - the runtime's directories: what the checkpoints and the outputs are written into.
 */
#ifndef TY_RUNTIME_RT_FS_H
#define TY_RUNTIME_RT_FS_H

#include <stddef.h>

#include "common/ty_error.h"

/* mkdir -p path (0755); directories that exist already are fine. what names the directory in
 * the message ("checkpoint directory"). TY_EINVAL for an empty or too long path, TY_EIO when a
 * part cannot be made (the part and errno in err). */
ty_err rt_make_dirs(const char *path, const char *what, char *err, size_t errlen);

#endif
