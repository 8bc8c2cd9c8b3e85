#include "core/util/units.h"

#include <cstdio>

namespace mfsdp {

std::string human_bytes(double b, int decimals) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  while (b >= 1024 && i < 3) b /= 1024, ++i;
  char buf[32];
  if (i == 0) std::snprintf(buf, sizeof(buf), "%.0f %s", b, units[i]);
  else std::snprintf(buf, sizeof(buf), "%.*f %s", decimals, b, units[i]);
  return buf;
}

}  // namespace mfsdp
