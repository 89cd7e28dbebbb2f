# Generates a .cpp holding every file under UI_DIR as a byte array, so the collector serves
# the UI without files on disk. Run at build time:
#   cmake -DUI_DIR=... -DOUTPUT=... -P embed_ui.cmake
file(GLOB_RECURSE files RELATIVE "${UI_DIR}" "${UI_DIR}/*")
# ui/package.json only tells node the files are ES modules (the unit tests); it is not served.
list(REMOVE_ITEM files package.json)
list(SORT files)
set(body "// Generated from ui/ by cmake/embed_ui.cmake. Do not edit.\n#include \"collector/http/ui_assets.hpp\"\n\nnamespace collector {\nnamespace {\n")
set(table "")
set(i 0)
foreach(f IN LISTS files)
    file(READ "${UI_DIR}/${f}" hex HEX)
    string(LENGTH "${hex}" hexlen)
    math(EXPR size "${hexlen} / 2")
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
    string(APPEND body "const unsigned char file_${i}[] = {${bytes}0};\n")
    string(APPEND table "    {\"/${f}\", {reinterpret_cast<const char*>(file_${i}), ${size}}},\n")
    math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "} // namespace\n\nconst std::vector<ui_asset>& embedded_ui() {\n    static const std::vector<ui_asset> assets = {\n${table}    };\n    return assets;\n}\n\n} // namespace collector\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
