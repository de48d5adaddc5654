// Tools as plain typed C functions: wit-bindgen writes the glue from wit/tool.wit into build/,
// and Cordon derives each tool's schema from the WIT types. Arguments belong to the function
// (free them, or hand them back in the result); results are freed by the glue after the call.

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

void exports_local_tool_text_word_count(tool_string_t *text, exports_local_tool_text_counts_t *ret) {
  uint32_t words = 0, lines = 0;
  int in_word = 0;
  for (size_t i = 0; i < text->len; i++) {
    uint8_t c = text->ptr[i];
    if (c == '\n') lines++;
    if (isspace(c)) {
      in_word = 0;
    } else if (!in_word) {
      in_word = 1;
      words++;
    }
  }
  if (text->len > 0 && text->ptr[text->len - 1] != '\n') lines++;
  ret->words = words;
  ret->lines = lines;
  ret->bytes = (uint32_t)text->len;
  tool_string_free(text);
}

bool exports_local_tool_text_shout(tool_string_t *text, tool_string_t *ret, tool_string_t *err) {
  if (text->len == 0) {
    tool_string_free(text);
    tool_string_dup(err, "the text is empty: pass the text to shout");
    return false;
  }
  for (size_t i = 0; i < text->len; i++) text->ptr[i] = (uint8_t)toupper(text->ptr[i]);
  *ret = *text;  // the argument's buffer becomes the result
  return true;
}
