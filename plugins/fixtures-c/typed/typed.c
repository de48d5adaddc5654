// The C twin of the Rust `typed` fixture: a component with plain typed exports and no Cordon
// contract, built with wit-bindgen's C bindings. Each echo function hands back what it was
// given (the arguments are the callee's to keep, so they move into the result as they are).

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "typed_c.h"

void exports_typed_c_greet(typed_c_string_t *name, typed_c_string_t *ret) {
  static const char hello[] = "Hello, ";
  size_t len = sizeof hello - 1 + name->len + 1;
  uint8_t *text = malloc(len);
  if (!text) abort();
  memcpy(text, hello, sizeof hello - 1);
  memcpy(text + sizeof hello - 1, name->ptr, name->len);
  text[len - 1] = '!';
  typed_c_string_free(name);
  ret->ptr = text;
  ret->len = len;
}

int32_t exports_fixture_typed_c_calc_add(int32_t a, int32_t b) {
  return (int32_t)((uint32_t)a + (uint32_t)b);
}

bool exports_fixture_typed_c_calc_divide(double a, double b, double *ret, typed_c_string_t *err) {
  if (b == 0) {
    typed_c_string_dup(err, "cannot divide by zero");
    return false;
  }
  *ret = a / b;
  return true;
}

void exports_fixture_typed_c_kinds_echo_point(exports_fixture_typed_c_kinds_point_t *p,
                                              exports_fixture_typed_c_kinds_point_t *ret) {
  *ret = *p;
}

void exports_fixture_typed_c_kinds_echo_shape(exports_fixture_typed_c_kinds_shape_t *s,
                                              exports_fixture_typed_c_kinds_shape_t *ret) {
  *ret = *s;
}

exports_fixture_typed_c_kinds_color_t exports_fixture_typed_c_kinds_echo_color(
    exports_fixture_typed_c_kinds_color_t c) {
  return c;
}

exports_fixture_typed_c_kinds_perms_t exports_fixture_typed_c_kinds_echo_perms(
    exports_fixture_typed_c_kinds_perms_t p) {
  return p;
}

void exports_fixture_typed_c_kinds_echo_tuple(typed_c_tuple3_u8_string_char32_t *t,
                                              typed_c_tuple3_u8_string_char32_t *ret) {
  *ret = *t;
}

bool exports_fixture_typed_c_kinds_echo_nested(typed_c_option_u16_t *maybe_o,
                                               typed_c_option_u16_t *ret) {
  if (!maybe_o) return false;
  *ret = *maybe_o;
  return true;
}

void exports_fixture_typed_c_kinds_echo_lists(typed_c_list_list_string_t *l,
                                              typed_c_list_list_string_t *ret) {
  *ret = *l;
}

bool exports_fixture_typed_c_kinds_echo_result(
    exports_fixture_typed_c_kinds_result_u32_string_t *r, uint32_t *ret,
    typed_c_string_t *err) {
  if (r->is_err) {
    *err = r->val.err;
    return false;
  }
  *ret = r->val.ok;
  return true;
}

uint64_t exports_fixture_typed_c_kinds_u64_max(void) { return UINT64_MAX; }
