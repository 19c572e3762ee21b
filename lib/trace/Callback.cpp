// trace/Callback.cpp — debug_callback and debug_print: host_callback ops.
#include "runtime/Callbacks.h"
#include "trace/Tracer.h"

#include <adjit/debug.h>

#include <cstdio>

namespace adjit {

void debug_callback(std::function<void(const std::vector<Array>&)> fn, const std::vector<Tensor>& tensors,
                    std::source_location l) {
  Location loc = Location::from(l);
  detail::TraceState* s = detail::currentTrace();
  if (!s) throw Error("debug_callback: called outside of a trace", loc);
  std::vector<ir::ValueId> operands;
  std::vector<Type> types;
  for (const Tensor& t : tensors) {
    operands.push_back(detail::valueOf(t, "debug_callback", loc));
    types.push_back(t.type());
  }
  ir::Attrs a;
  a.set("id", runtime::registerCallback(std::move(fn), std::move(types)));
  s->builder.create(ir::OpKind::HostCallback, operands, std::move(a), {}, loc);
}

void debug_print(std::string format, const std::vector<Tensor>& tensors, std::source_location loc) {
  debug_callback(
      [format = std::move(format)](const std::vector<Array>& values) {
        std::string out;
        std::size_t next = 0, pos = 0;
        while (pos < format.size()) {
          if (format.compare(pos, 2, "{}") == 0 && next < values.size()) {
            out += values[next++].str();
            pos += 2;
          } else {
            out += format[pos++];
          }
        }
        std::fputs(out.c_str(), stdout);
        std::fflush(stdout);
      },
      tensors, loc);
}

} // namespace adjit
