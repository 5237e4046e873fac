/* nDPI's TLV serializer as an oracle for sonde's (crates/export/src/tlv.rs): this program links
 * Debian's libndpi and does nothing but call its serializer and deserializer.
 *
 *   ndpi_tlv encode < items > tlv    one item per line: "n KEY u NUMBER", "n KEY s TEXT",
 *                                    "s NAME u NUMBER", "s NAME s TEXT" (n: numeric key,
 *                                    s: string key); "e" ends a record
 *   ndpi_tlv decode < tlv > items    one "KEY\tVALUE" line per item (numbers in decimal),
 *                                    "EOR" at each end of record
 *
 * Built by tests/system/test_zmq_chain.py with: cc ndpi_tlv.c -lndpi
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ndpi/ndpi_api.h>

static int encode(void) {
  ndpi_serializer s;
  char line[70000];
  if (ndpi_init_serializer(&s, ndpi_serialization_format_tlv) != 0) return 1;
  while (fgets(line, sizeof(line), stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (line[0] == 'e') {
      ndpi_serialize_end_of_record(&s);
      continue;
    }
    char kind = line[0], *key = line + 2, *sp = strchr(key, ' ');
    if (!sp || (kind != 'n' && kind != 's')) return 2;
    *sp = 0;
    char vtype = sp[1], *value = sp + 3;
    int rc;
    if (kind == 'n' && vtype == 'u')
      rc = ndpi_serialize_uint32_uint64(&s, (u_int32_t)strtoul(key, NULL, 10), strtoull(value, NULL, 10));
    else if (kind == 'n')
      rc = ndpi_serialize_uint32_string(&s, (u_int32_t)strtoul(key, NULL, 10), value);
    else if (vtype == 'u')
      rc = ndpi_serialize_string_uint64(&s, key, strtoull(value, NULL, 10));
    else
      rc = ndpi_serialize_string_string(&s, key, value);
    if (rc != 0) return 3;
  }
  u_int32_t n;
  char *buf = ndpi_serializer_get_buffer(&s, &n);
  fwrite(buf, 1, n, stdout);
  ndpi_term_serializer(&s);
  return 0;
}

static int decode(void) {
  static u_int8_t buf[1 << 24];
  size_t n = fread(buf, 1, sizeof(buf), stdin);
  ndpi_deserializer d;
  if (ndpi_init_deserializer_buf(&d, buf, (u_int32_t)n) != 0) return 1;
  if (ndpi_deserialize_get_format(&d) != ndpi_serialization_format_tlv) return 2;
  ndpi_serialization_type kt, et;
  while ((et = ndpi_deserialize_get_item_type(&d, &kt)) != ndpi_serialization_unknown) {
    if (et == ndpi_serialization_end_of_record) {
      printf("EOR\n");
      ndpi_deserialize_next(&d);
      continue;
    }
    u_int32_t k32, v32;
    u_int64_t v64;
    int32_t i32;
    int64_t i64;
    float f;
    ndpi_string ks, vs;
    if (kt == ndpi_serialization_uint32) {
      ndpi_deserialize_key_uint32(&d, &k32);
      printf("%u\t", k32);
    } else if (kt == ndpi_serialization_string) {
      ndpi_deserialize_key_string(&d, &ks);
      printf("%.*s\t", (int)ks.str_len, ks.str);
    } else {
      return 3;
    }
    switch (et) {
    case ndpi_serialization_uint8:
    case ndpi_serialization_uint16:
    case ndpi_serialization_uint32:
      ndpi_deserialize_value_uint32(&d, &v32);
      printf("%u\n", v32);
      break;
    case ndpi_serialization_uint64:
      ndpi_deserialize_value_uint64(&d, &v64);
      printf("%" PRIu64 "\n", v64);
      break;
    case ndpi_serialization_int8:
    case ndpi_serialization_int16:
    case ndpi_serialization_int32:
      ndpi_deserialize_value_int32(&d, &i32);
      printf("%d\n", i32);
      break;
    case ndpi_serialization_int64:
      ndpi_deserialize_value_int64(&d, &i64);
      printf("%" PRId64 "\n", i64);
      break;
    case ndpi_serialization_float:
      ndpi_deserialize_value_float(&d, &f);
      printf("%g\n", f);
      break;
    case ndpi_serialization_string:
      ndpi_deserialize_value_string(&d, &vs);
      printf("%.*s\n", (int)vs.str_len, vs.str);
      break;
    default:
      return 4;
    }
    ndpi_deserialize_next(&d);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "encode")) return encode();
  if (argc == 2 && !strcmp(argv[1], "decode")) return decode();
  fprintf(stderr, "usage: ndpi_tlv encode|decode\n");
  return 64;
}
