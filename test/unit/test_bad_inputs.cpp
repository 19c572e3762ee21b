// test/unit/test_bad_inputs.cpp — the bad-input table in docs/guide/errors.md. Each
// row runs a mistake and records the adjit::Error it raises; the test fails if
// the file differs from what the rows produce, so the table cannot go stale.
// Regenerate it with: ADJIT_UPDATE_DOCS=1 build/adjit_tests -tc="*bad-input table*"
#include <adjit/adjit.h>
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

using namespace adjit;

namespace {

struct Row {
  std::string input;
  std::function<void()> run;
  std::string printed; ///< without `run`: what a program run elsewhere prints (see printedBy)
};
struct Section {
  std::string title, intro;
  std::vector<Row> rows;
};

/// The error text as a user sees it; a location in this file (the error's, or
/// one its message names) is the user's line, shown as `your.cpp:LINE` so the
/// table does not change with this file.
std::string errorText(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    const Location& l = e.location();
    std::string where;
    if (l.known() && l.file.find("test_bad_inputs.cpp") != std::string::npos) where = "your.cpp:LINE: ";
    else if (l.known()) where = l.str() + ": ";
    static const std::regex here(R"([^ ]*test_bad_inputs\.cpp:[0-9]+:[0-9]+)");
    return where + "error: " + std::regex_replace(e.message(), here, "your.cpp:LINE");
  } catch (const std::exception& e) {
    return std::string("NOT AN adjit::Error: ") + e.what();
  }
  return "NO ERROR";
}

std::string cell(const std::string& s) {
  std::string r = "<code>";
  for (char c : s) {
    if (c == '\n') r += "<br>";
    else if (c == '|') r += "&#124;";
    else if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == ' ' && (r.ends_with("<br>") || r.ends_with("&nbsp;"))) r += "&nbsp;";
    else r += c;
  }
  return r + "</code>";
}

/// A function over `x: f32[3]` and `i: i32[3]` with one body line.
std::string fn(const std::string& body) {
  return "func @f(%x: f32[3], %i: i32[3]) -> (f32[3]) {\n  " + body + "\n  return %x\n}";
}

Row adj(const std::string& text) {
  return {text, [text] { Module::parse(text, "bad.adj"); }};
}

const Type F3{DType::f32, {3}}, F4{DType::f32, {4}}, I3{DType::i32, {3}};

#define CPP(...) Row{#__VA_ARGS__, [] { __VA_ARGS__; }}

/// A mistake made outside this process (a command line, an environment
/// variable) and what it prints. The test named in the section's intro
/// checks that the program prints exactly this: it greps for its output here.
Row printedBy(const std::string& input, const std::string& printed) { return {input, nullptr, printed}; }

std::vector<Section> sections() {
  return {
      {"IR text",
       "What `Module::parse`, `adjit opt` and every other command say about `.adj` text: the file, line and column, "
       "then what was expected and what was found.",
       {
           adj("func @f(%x: f32[3]) -> (f32[3]) {\n  %y = frobnicate(%x) : f32[3]\n  return %y\n}"),
           adj(fn("%y = add(%x, %i) : f32[3]")),
           adj(fn("%y = add(%x) : f32[3]")),
           adj(fn("%y = add(%x, %z) : f32[3]")),
           adj(fn("%y = neg(%x) : f32[4]")),
           adj(fn("%x = neg(%x) : f32[3]")),
           adj(fn("%y = reduce_sum(%x) {axes = [0], keepdims = false, axis = 0} : f32[]")),
           adj(fn("%y = reduce_sum(%x) {keepdims = false} : f32[]")),
           adj(fn("%y = reduce_sum(%x) {axes = 0, keepdims = false} : f32[]")),
           adj(fn("%y = transpose(%x) {perm = [1]} : f32[3]")),
           adj(fn("%y = concatenate(%x, %x) {axis = -1} : f32[6]")),
           adj(fn("%c = constant() {value = dense<f32[2], [1, 2, 3]>} : f32[2]")),
           adj(fn("%c = constant() {value = dense<i32[1], [99999999999]>} : i32[1]")),
           adj(fn("%c = constant() {value = dense<f32[4611686018427387903], [0]>} : f32[4611686018427387903]")),
           adj(fn("%y = neg(%x) : f32[3]  ; loc(\"a.cpp\":4294967297:1)")),
           adj(fn("%y = call @nope(%x) : f32[3]")),
           adj("func @f(%x: f32[3]) -> (f32[3]) {\n  return %x\n}\nfunc @f(%x: f32[3]) -> (f32[3]) {\n  return %x\n}"),
           adj("func @f(%x: f32[3]) -> (f64[3]) {\n  return %x\n}"),
           adj("func @f(%x: f32[4294967296,4294967296]) -> () {\n  return\n}"),
           adj("func @f(%x: f32[3]) -> (f32[3]) {\n  %y = neg(%x) : f32[3]"),
           adj("func @f(%x: f32[3]) -> (f32[3]) {\n  %y = neg(%x) $ f32[3]\n  return %y\n}"),
           adj("func @f(%x: f32[3]) -> (f32[3]) {\n  %y = neg(%x) : f32[3]\n  %z = neg(%y) : f32[\n  return %z\n}"),
       }},
      {"Shapes and dtypes",
       "Ops called on Tensors while tracing: the op (by the name of the function you called), what it expected, "
       "what it got, and your source line.",
       {
           CPP(trace([](Tensor a, Tensor b) { return a + b; }, F3, F4)),
           CPP(trace([](Tensor a, Tensor b) { return a * b; }, F3, I3)),
           CPP(trace([](Tensor a) { return a * full({3}, 0.5); }, I3)),
           CPP(trace([](Tensor a) { return matmul(a, a); }, Type{DType::f32, {2, 3}})),
           CPP(trace([](Tensor a) { return matmul(a, a, {.transpose_b = true}); }, F3)),
           CPP(trace([](Tensor a) { return reshape(a, {2, 2}); }, F3)),
           CPP(trace([](Tensor a) { return transpose(a, {0, 0}); }, Type{DType::f32, {2, 2}})),
           CPP(trace([](Tensor a) { return sum(a, {1}); }, F3)),
           CPP(trace([](Tensor a) { return a[3]; }, F3)),
           CPP(trace([](Tensor a) { return concatenate({a, a}, 2); }, F3)),
           CPP(trace([](Tensor a, Tensor i) { return take(a, i); }, F3, F3)),
           CPP(trace([](Tensor a) { return where(a, a, a); }, F3)),
           CPP(trace([](Tensor a) { return exp(a); }, I3)),
           CPP(trace([](Tensor a) { return a + full({4294967296, 4294967296}, 1); }, F3)),
       }},
      {"Control flow",
       "cond and switch_case branches must return the same structure of the same dtypes and shapes, and a loop body "
       "(scan, fori_loop, while_loop) the structure of its initial carry: the error is at the call's line, and names "
       "the line in each branch that made the leaf that differs.",
       {
           CPP(trace([](Tensor a) { return cond(sum(a) > 0.0f, [](Tensor x) { return concatenate({x, x}); }, [](Tensor x) { return x * 2.0f; }, a); }, F3)),
           CPP(trace([](Tensor a) { return scan([](std::vector<Tensor> c, Tensor x) { c.push_back(c[0]); return std::pair{c, x}; }, std::vector<Tensor>{a, a}, a).first[0]; }, F3)),
           CPP(trace([](Tensor a) {
             using V = std::vector<Tensor>;
             return fori_loop(0, 3, [](Tensor, std::pair<V, V> c) { return std::pair{c.second, c.first}; }, std::pair{V{a, a}, V{a}}).first[0];
           }, F3)),
           CPP(trace([](Tensor a) { return while_loop([](Tensor c) { return sum(c) < 10.0f; }, [](Tensor c) { return cast(c, DType::f64); }, a); }, F3)),
           CPP(grad([](Tensor x) { return while_loop([](Tensor t) { return t < 1000.0; }, [](Tensor t) { return t * 1.5; }, x, {.max_iterations = 12}); })(Array(1.0))),
       }},
      {"Gradients",
       "grad, vjp, gradients, GradientTape and custom_gradient. Mistakes in the number of arguments are "
       "compile-time errors instead (test/compile_fail).",
       {
           CPP(grad([](Tensor x) { return x * x; })(Array(std::vector<float>{1, 2}))),
           CPP(grad([](Tensor x, Tensor i) { return sum(x); }, argnums<1>)(Array(1.0f), Array(int32_t{1}))),
           CPP(vjp([](Tensor x) { return x * x; }, Array(std::vector<float>{1, 2})).second(Array(1.0f))),
           CPP(trace([](Tensor x) { return *gradients({x * x}, {x}, {x, x})[0]; }, F3)),
           CPP(trace([](Tensor x) { GradientTape t; t.watch(x); Tensor y = sum(x * x); (void)t.gradient(y, x); return *t.gradient(y, x); }, F3)),
           CPP(grad([](Tensor x) {
             auto f = custom_gradient([](Tensor a) { return std::make_pair(a * a, [](Tensor dy) { return std::vector<Tensor>{dy, dy}; }); });
             return sum(f(x));
           })(Array(1.0f))),
           CPP(grad([](Tensor x) {
             auto f = custom_gradient([](Tensor a) { return std::make_pair(a * a, [](Tensor dy) { return sum(dy); }); });
             return sum(f(x));
           })(Array(std::vector<float>{1, 2}))),
       }},
      {"Batching",
       "vmap: the batch axis of each argument and result (in_axes, out_axes) and the batch size, at the line that "
       "called vmap (with Arrays or inside a trace). The vmap pass of `adjit opt` says the same of its arguments; `test/ir/vmap-errors.adj` checks that it prints these "
       "lines, for `@f(x: f32[3], y: f32[3]) -> f32[3]`.",
       {
           CPP(vmap([](Tensor a, Tensor b) { return a + b; })(Array(std::vector<float>{1, 2, 3}), Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.axis_size = 2})(Array(std::vector<float>{1, 2, 3}))),
           CPP(vmap([](Tensor a, Tensor b) { return a + b; }, {.in_axes = {0}})(Array(std::vector<float>{1, 2}), Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.in_axes = {1}})(Array(std::vector<float>{1, 2, 3}))),
           CPP(vmap([](Tensor a, Tensor b) { return a * b; })(Array(std::vector<float>{1, 2}), Array(2.0f))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.in_axes = {std::nullopt}})(Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.in_axes = {std::nullopt}, .axis_size = -1})(Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.out_axes = {std::nullopt}})(Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return a * 2.0f; }, {.out_axes = {2}})(Array(std::vector<float>{1, 2}))),
           CPP(vmap([](Tensor a) { return std::make_tuple(a, a); }, {.out_axes = {0, 0, 0}})(Array(std::vector<float>{1, 2}))),
           CPP(trace([](Tensor a) { return vmap([](Tensor x) { return sum(x); }, {.in_axes = {-3}})(a); }, Type{DType::f32, {2, 3}})),
           CPP(vmap([](Tensor p, Tensor x) {
             return cond(gt(p, 0.0f), [](Tensor a) { debug_callback([](const std::vector<Array>&) {}, {a}); return a; },
                         [](Tensor a) { return a; }, x);
           })(Array(std::vector<float>{1, -1}), Array(std::vector<float>{1, 2}))),
           CPP([] {
             Variable w("w", Array(std::vector<float>{1, 2}));
             return vmap([&w](Tensor x) { (void)w.assign(x); return x; })(Array(std::vector<float>{1, 2, 3, 4}, {2, 2}));
           }()),
           printedBy("adjit opt f.adj --passes='vmap(f)'", "adjit: error: vmap pass: give the batch size: vmap(f, axis_size=N)"),
           printedBy("adjit opt f.adj --passes='vmap(f, axis_size=n)'", "adjit: error: vmap pass: axis_size must be an integer, got 'n'"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axes=0, axis_size=4)'",
                     "adjit: error: vmap pass: in_axes must be a list like [0,-,1] (- for none), got '0'"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axes=[0,x], axis_size=4)'",
                     "adjit: error: vmap pass: an entry of in_axes must be an integer, got 'x'"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axis=[0,0], axis_size=4)'",
                     "adjit: error: vmap pass: unknown option 'in_axis=[0,0]' (known: in_axes, out_axes, axis_size)"),
           printedBy("adjit opt f.adj --passes='vmap(axis_size=4)'",
                     "adjit: error: vmap pass: expected vmap(F, in_axes=[...], out_axes=[...], axis_size=N), got vmap(axis_size=4)"),
           printedBy("adjit opt f.adj --passes='vmap(g, axis_size=4)'", "adjit: error: vmap pass: no function named @g in the module"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axes=[0], axis_size=4)'",
                     "adjit: error: vmap: in_axes has 1 entries, but @f has 2 parameters"),
           printedBy("adjit opt f.adj --passes='vmap(f, out_axes=[0,0], axis_size=4)'",
                     "adjit: error: vmap: out_axes has 2 entries, but @f has 1 results"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axes=[2,0], axis_size=4)'",
                     "adjit: error: vmap: parameter 0 of @f is f32[3] per example, so its batch axis must be in [-2, 1], got 2"),
           printedBy("adjit opt f.adj --passes='vmap(f, out_axes=[-3], axis_size=4)'",
                     "adjit: error: vmap: result 0 of @f is f32[3] per example, so its batch axis must be in [-2, 1], got -3"),
           printedBy("adjit opt f.adj --passes='vmap(f, in_axes=[0,-], out_axes=[-], axis_size=4)'",
                     "adjit: error: vmap: result 0 of @f depends on a batched parameter, but out_axes gives it none"),
           printedBy("adjit opt f.adj --passes='vmap(f, axis_size=-1)'", "adjit: error: vmap: the batch size must be at least 0, got -1"),
       }},
      {"Arrays and calls",
       "Host arrays, and calling compiled functions.",
       {
           CPP(Array(std::vector<float>{1, 2, 3}, {2, 2})),
           CPP(Array(1.0f).data<double>()),
           CPP(Array(std::vector<float>{1, 2}).item<float>()),
           CPP(Array(Type{DType::f32, {4611686018427387903}})),
           CPP(jit([](Tensor a, Tensor b) { return a + b; })(Array(1.0f), Array(2.0))),
           CPP(jit([](Tensor a) { debug_callback([](const std::vector<Array>&) { throw std::runtime_error("disk full"); }, {a}); return a; })(Array(1.0f))),
           CPP(Tensor t; (void)exp(t)),
       }},
      {"map",
       "`adjit::map` over a leading axis (see [batching](batching.md)); the line is the one that made the `map`.",
       {
           CPP(map([](Tensor x, Tensor y) { return x + sum(y); })(Array(DType::f32, {3, 2}), Array(DType::f32, {4}))),
           CPP(map([](std::pair<Tensor, Tensor> p) { return p.first; })(std::pair{Array(DType::f32, {3}), Array(DType::f32, {2})})),
           CPP(map([](Tensor x, Tensor y) { return x * y; }, {.in_axes = {0, 1}})),
           CPP(map([](Tensor x, Tensor y) { return x * y; }, {.in_axes = {0}})(Array(DType::f32, {3}), Array(DType::f32, {3}))),
           CPP(map([](Tensor x, Tensor y) { return x * y; })(Array(DType::f32, {3}), 2.0f)),
           CPP(map([](Tensor x) { return x; })(Array(1.0f))),
           CPP(map([](Tensor x) { return x; }, {.in_axes = {std::nullopt}})(Array(DType::f32, {3}))),
           CPP(Variable v("v", Array(1.0f)); map([v](Tensor x) { v.assign(sum(x)); return x; })(Array(DType::f32, {2, 3}))),
       }},
      {"The adjit command",
       "Mistakes on the command line: the flag, what was expected and what was got. `test/ir/cli-argnums.adj`, "
       "`cli-derived.adj` and `cli-help.adj` check that the command prints these lines; `model.adj` holds "
       "`@f(x: f64[2], n: i32[], w: f64[2]) -> f64[]` and `@h() -> f64[]`.",
       {
           printedBy("adjit compile model.adj -o m.o --header m.h --grad f --argnums 0,3",
                     "adjit: error: compile: --argnums '0,3' for --grad f: @f has 3 inputs, so expected 0 to 2, got 3"),
           printedBy("adjit compile model.adj -o m.o --header m.h --grad f --argnums 0,2,0",
                     "adjit: error: compile: --argnums '0,2,0' for --grad f: expected each input once, got 0 twice"),
           printedBy("adjit compile model.adj -o m.o --header m.h --grad f --argnums 1",
                     "adjit: error: compile: --argnums '1' for --grad f: input 1 of @f is i32[], expected a floating-point input"),
           printedBy("adjit compile model.adj -o m.o --header m.h --grad f --argnums 0,x",
                     "adjit: error: compile: --argnums '0,x' for --grad f: expected input numbers separated by commas, such as "
                     "0,2, got 'x' (see 'adjit --help')"),
           printedBy("adjit compile model.adj -o m.o --header m.h --argnums 0 --grad f",
                     "adjit: error: --argnums '0' must follow the --grad it applies to, as in --grad f --argnums 0,2 (see "
                     "'adjit --help')"),
           printedBy("adjit compile model.adj -o m.o --header m.h --grad f --argnums 0 --grad f",
                     "adjit: error: compile: --grad f is given twice, with --argnums '0' and no --argnums: expected one set of "
                     "inputs for its f_grad"),
           printedBy("adjit compile model.adj -o m.o --header m.h --grad h --argnums 0",
                     "adjit: error: compile: --argnums '0' for --grad h: @h has no inputs, got input 0"),
           printedBy("adjit dump f.adj --emit=llvm --fn f.grad",
                     "adjit: error: dump: no function named @f.grad (functions: @f); --passes='grad(f)' makes it"),
           printedBy("adjit dump f.adj --emt=llvm",
                     "adjit: error: unknown option '--emt=llvm'; did you mean '--emit'? (see 'adjit --help')"),
           printedBy("adjit run f.adj --fn f --arg 1,2:f32[2] --grad f",
                     "adjit: error: run: option --grad does not apply to 'adjit run'; it is an option of 'adjit compile' (see 'adjit run --help')"),
           printedBy("adjit dmup f.adj", "adjit: error: unknown command 'dmup'; did you mean 'dump'? (see 'adjit --help')"),
       }},
      {"Environment variables",
       "A value adjit cannot use is a warning on stderr, once per process, and the program runs on. "
       "`test/debug/dump_and_log.sh` checks that these lines are printed.",
       {
           printedBy("ADJIT_LOG=pases", "adjit: warning: ADJIT_LOG: unknown value 'pases' ignored (known: compile, passes, all)"),
       }},
  };
}

std::string render() {
  std::ostringstream o;
  o << "# Errors: what adjit says when an input is wrong\n\n"
       "Every user mistake raises `adjit::Error`, never an abort. The message names the op and what was expected "
       "and got; `what()` starts with your source line, captured with `std::source_location` when the op was "
       "traced:\n\n"
       "```\nexamples/quickstart/main.cpp:30:43: error: add: incompatible shapes f32[3] and f32[2]\n```\n\n"
       "Malformed `.adj` text reports `file:line:column` and what was expected; an attribute an op does not know is "
       "an error, not silently kept. `grad` and `value_and_grad` errors found while tracing (a non-scalar result, "
       "an integer argument) point at the line that called `grad`; a `vjp` cotangent of the wrong type, at the line "
       "that passed it. Internal invariant failures throw `adjit::InternalError` naming adjit's file and line: those "
       "are bugs.\n\n"
       "Mistakes the compiler can see are compile-time errors, one `static_assert` each, and the compiler's "
       "\"required from here\" names your line: calling a jitted function, a `map`, `grad` or `custom_gradient` with the "
       "wrong number of arguments, an argnum past the last argument, `grad(f, {0, 1})` (write `argnums<0, 1>`), a "
       "`grad_fn` of the wrong arity, a `cond` on a C++ `bool`, an `if`, `while` or `&&` on a Tensor (the error "
       "points to `cond`), a `custom_jvp` rule of the wrong signature, and a `scan`, `fori_loop` or `while_loop` "
       "carry (or `xs`) that is not a structure of Tensors, such as an `Array` (`while_loop: the carry must be "
       "Tensors, or tuples, pairs, vectors, arrays or ADJIT_TREE structs of them (make an Array a Tensor with "
       "constant(a))`), and a compiled call of a function returning a struct registered with `ADJIT_TREE` (see "
       "[structures](structures.md)). `test/compile_fail/` holds one file per case, compiled by the `compile_fail` test.\n\n"
       "The tables below list what adjit says for about ninety bad inputs. Every row was run by "
       "`test/unit/test_bad_inputs.cpp`, which fails when this file differs from what the rows produce: the tables "
       "cannot go stale. Regenerate the file after changing a message with\n"
       "`ADJIT_UPDATE_DOCS=1 build/adjit_tests -tc=\"*bad-input table*\"`.\n\n"
       "Every mistake is an `adjit::Error` (`what()` is the whole line, `message()` and `location()` its parts); "
       "`your.cpp:LINE` stands for the line of your code that made the call. Errors of the `adjit` command line are "
       "pinned by `test/ir/cli-*.adj`; *The adjit command* below shows some.\n";
  for (const Section& s : sections()) {
    o << "\n## " << s.title << "\n\n" << s.intro << "\n\n| input | error |\n| --- | --- |\n";
    for (const Row& r : s.rows) o << "| " << cell(r.input) << " | " << cell(r.run ? errorText(r.run) : r.printed) << " |\n";
  }
  return o.str();
}

} // namespace

TEST_CASE("the bad-input table in docs/guide/errors.md is what adjit says") {
  const std::string path = std::string(ADJIT_SOURCE_DIR) + "/docs/guide/errors.md";
  const std::string now = render();
  CHECK(now.find("NO ERROR") == std::string::npos);
  CHECK(now.find("NOT AN adjit::Error") == std::string::npos);
  if (const char* u = std::getenv("ADJIT_UPDATE_DOCS"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << now;
    MESSAGE("wrote " << path);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream was;
  was << in.rdbuf();
  INFO("docs/guide/errors.md is stale; regenerate it with ADJIT_UPDATE_DOCS=1 build/adjit_tests -tc=\"*bad-input table*\"");
  CHECK(was.str() == now);
}
