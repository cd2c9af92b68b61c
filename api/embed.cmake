# Turns a file into a C source defining `const char NAME[]` (the bytes plus a
# NUL) and `const size_t NAME_len`. Run as:
#   cmake -DINPUT=file -DOUTPUT=file.c -DNAME=symbol -DHEADER=api/x.h -P embed.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the initializer into lines of 16 bytes.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "/* Generated from ${INPUT} by api/embed.cmake; do not edit. */\n"
  "#include \"${HEADER}\"\n\n"
  "const char ${NAME}[] = {\n    ${bytes}0x00};\n"
  "const size_t ${NAME}_len = ${nbytes};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
