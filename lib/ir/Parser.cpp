// ir/Parser.cpp — parses the `.adj` text form. Errors name line:column and what
// was expected. Functions may be referenced before they are defined: the body
// of each function is built after the functions it calls.
#include "ir/Builder.h"
#include "ir/Text.h"
#include "ir/OpInfo.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <functional>
#include <map>
#include <set>

namespace adjit::ir {
namespace {

enum class Tok { Ident, Value, Func, Int, Float, String, Punct, Loc, End };

struct Token {
  Tok kind;
  std::string text;
  Location loc;
};

std::string describe(const Token& t) {
  switch (t.kind) {
  case Tok::End: return "end of input";
  case Tok::Value: return "'%" + t.text + "'";
  case Tok::Func: return "'@" + t.text + "'";
  case Tok::String: return "string \"" + t.text + "\"";
  case Tok::Loc: return "a location comment";
  default: return "'" + t.text + "'";
  }
}

class Lexer {
public:
  /// `column` is where the text starts on its line (for text cut out of a longer line).
  Lexer(std::string_view text, std::string_view file, uint32_t column = 1)
      : s_(text), file_(Location(file, 0, 0).file), col_(column) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skipSpace();
      Location at = here();
      if (i_ >= s_.size()) {
        out.push_back({Tok::End, "", at});
        return out;
      }
      char c = s_[i_];
      if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') { // line comment
        std::size_t end = s_.find('\n', i_);
        advance((end == std::string_view::npos ? s_.size() : end) - i_);
      } else if (c == ';') {
        std::size_t end = s_.find('\n', i_);
        if (end == std::string_view::npos) end = s_.size();
        std::string_view body = s_.substr(i_ + 1, end - i_ - 1);
        while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
        if (body.substr(0, 4) == "loc(") out.push_back({Tok::Loc, std::string(body), at});
        advance(end - i_);
      } else if (c == '%' || c == '@') {
        advance(1);
        std::string name = word(true);
        if (name.empty()) throw Error(fmt::format("expected a name after '{}'", c), at);
        out.push_back({c == '%' ? Tok::Value : Tok::Func, name, at});
      } else if (c == '"') {
        out.push_back({Tok::String, string(), at});
      } else if (std::isdigit(static_cast<unsigned char>(c)) || ((c == '-' || c == '+') && i_ + 1 < s_.size() &&
                 (std::isdigit(static_cast<unsigned char>(s_[i_ + 1])) || s_.substr(i_ + 1, 3) == "inf"))) {
        out.push_back(number(at));
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        out.push_back({Tok::Ident, word(false), at});
      } else if (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == '>') {
        advance(2);
        out.push_back({Tok::Punct, "->", at});
      } else if (std::string_view("(){}[]<>,:=").find(c) != std::string_view::npos) {
        advance(1);
        out.push_back({Tok::Punct, std::string(1, c), at});
      } else {
        throw Error(fmt::format("unexpected character '{}'", c), at);
      }
    }
  }

private:
  Location here() const {
    Location l; // file_ is interned already
    l.file = file_;
    l.line = line_;
    l.column = col_;
    return l;
  }
  void advance(std::size_t n) {
    for (std::size_t k = 0; k < n && i_ < s_.size(); ++k, ++i_) {
      if (s_[i_] == '\n') { ++line_; col_ = 1; }
      else ++col_;
    }
  }
  void skipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) advance(1);
  }
  std::string word(bool allowLeadingDigit) {
    std::size_t start = i_;
    while (i_ < s_.size()) {
      char c = s_[i_];
      bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
      if (!ok || (i_ == start && !allowLeadingDigit && std::isdigit(static_cast<unsigned char>(c)))) break;
      advance(1);
    }
    return std::string(s_.substr(start, i_ - start));
  }
  std::string string() {
    Location at = here();
    advance(1);
    std::string r;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\n') break;
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        advance(1);
        r += s_[i_] == 'n' ? '\n' : s_[i_];
      } else {
        r += s_[i_];
      }
      advance(1);
    }
    if (i_ >= s_.size() || s_[i_] != '"') throw Error("unterminated string", at);
    advance(1);
    return r;
  }
  Token number(Location at) {
    std::size_t start = i_;
    if (s_[i_] == '-' || s_[i_] == '+') advance(1);
    if (s_.substr(i_, 3) == "inf") {
      advance(3);
      return {Tok::Float, std::string(s_.substr(start, i_ - start)), at};
    }
    bool isFloat = false;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (std::isdigit(static_cast<unsigned char>(c))) advance(1);
      else if (c == '.' || c == 'e' || c == 'E') {
        isFloat = true;
        advance(1);
        if ((c == 'e' || c == 'E') && i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) advance(1);
      } else break;
    }
    return {isFloat ? Tok::Float : Tok::Int, std::string(s_.substr(start, i_ - start)), at};
  }

  std::string_view s_;
  std::string_view file_;
  std::size_t i_ = 0;
  uint32_t line_ = 1, col_ = 1;
};

struct Named {
  std::string name;
  Location loc;
};

struct PendingOp {
  bool isReturn = false;
  std::vector<Named> results, operands;
  std::string mnemonic;
  Location loc;    ///< where the op's text starts
  Location srcLoc; ///< from a `; loc(...)` comment
  std::vector<Named> callees;
  Attrs attrs;
  std::vector<Type> types;
};

struct PendingFn {
  Named name;
  std::vector<std::pair<Named, Type>> params;
  std::vector<Type> results;
  std::vector<PendingOp> body;
};

class Parser {
public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {
    for (const Token& t : t_) annotated_ |= t.kind == Tok::Loc;
  }

  /// The whole text is one type.
  Type typeOnly() {
    Type t = type();
    if (peek().kind != Tok::End) expected("the end of the type");
    return t;
  }

  std::unique_ptr<Module> run() {
    std::vector<PendingFn> fns;
    while (peek().kind != Tok::End) fns.push_back(function());
    auto m = std::make_unique<Module>();
    std::map<std::string, const PendingFn*> byName;
    for (const PendingFn& f : fns) {
      if (!byName.emplace(f.name.name, &f).second)
        throw Error("redefinition of function @" + f.name.name, f.name.loc);
      m->functions.push_back(std::make_unique<Function>());
      m->functions.back()->name = f.name.name;
      m->functions.back()->loc = f.name.loc;
    }
    // Build bodies callees-first so call sites can be type-checked.
    std::set<std::string> done, active;
    std::function<void(const PendingFn&)> build = [&](const PendingFn& f) {
      if (done.count(f.name.name)) return;
      if (!active.insert(f.name.name).second)
        throw Error("function @" + f.name.name + " calls itself (recursion is not supported)", f.name.loc);
      for (const PendingOp& op : f.body)
        for (const Named& c : op.callees) {
          auto it = byName.find(c.name);
          if (it == byName.end()) throw Error("no function named @" + c.name + " in the module", c.loc);
          build(*it->second);
        }
      body(*m, *m->lookup(f.name.name), f);
      active.erase(f.name.name);
      done.insert(f.name.name);
    };
    for (const PendingFn& f : fns) build(f);
    return m;
  }

private:
  const Token& peek() const { return t_[p_]; }
  Token next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  [[noreturn]] void expected(const std::string& what) const {
    // A line left unfinished (an unclosed `f32[` at its end) is where the
    // mistake is, not the first token of the next line.
    if (p_ > 0 && t_[p_ - 1].loc.line < peek().loc.line && unfinished())
      throw Error("expected " + what + " after " + describe(t_[p_ - 1]) + ", found " + describe(peek()) +
                      (peek().kind == Tok::End ? "" : " on line " + std::to_string(peek().loc.line)),
                  t_[p_ - 1].loc);
    throw Error("expected " + what + ", found " + describe(peek()), peek().loc);
  }
  /// Whether the tokens read so far leave a '(', '[' or '<' open, or end with a
  /// separator: what follows must continue them.
  bool unfinished() const {
    int depth = 0;
    for (std::size_t i = 0; i < p_; ++i)
      if (t_[i].kind == Tok::Punct) {
        const std::string& p = t_[i].text;
        if (p == "(" || p == "[" || p == "<") ++depth;
        else if ((p == ")" || p == "]" || p == ">") && depth > 0) --depth;
      }
    const Token& last = t_[p_ - 1];
    return depth > 0 || (last.kind == Tok::Punct && (last.text == "," || last.text == ":" || last.text == "=" || last.text == "->"));
  }
  bool isPunct(std::string_view p) const { return peek().kind == Tok::Punct && peek().text == p; }
  bool accept(std::string_view p) {
    if (!isPunct(p)) return false;
    ++p_;
    return true;
  }
  void expect(std::string_view p) {
    if (!accept(p)) expected(fmt::format("'{}'", p)); // not "'" + std::string(p): GCC 12 warns falsely (-Wrestrict)
  }
  Named expectKind(Tok k, const std::string& what) {
    if (peek().kind != k) expected(what);
    Token t = next();
    return {t.text, t.loc};
  }
  int64_t integer() {
    if (peek().kind != Tok::Int) expected("an integer");
    std::string s = next().text;
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == ERANGE) throw Error("integer " + s + " is out of range", t_[p_ - 1].loc);
    return v;
  }

  DType dtype() {
    if (peek().kind == Tok::Ident) {
      static const std::map<std::string, DType> names = {
          {"f32", DType::f32}, {"f64", DType::f64}, {"i32", DType::i32}, {"i64", DType::i64}, {"i1", DType::i1}};
      auto it = names.find(peek().text);
      if (it != names.end()) {
        ++p_;
        return it->second;
      }
    }
    expected("a dtype (f32, f64, i32, i64, i1)");
  }

  Type type() {
    const Location start = peek().loc;
    Type t{dtype(), {}};
    expect("[");
    if (!isPunct("]")) {
      do {
        Location at = peek().loc;
        int64_t d = integer();
        if (d < 0) throw Error("negative dimension " + std::to_string(d), at);
        t.shape.push_back(d);
      } while (accept(","));
    }
    expect("]");
    try {
      t.bytes(); // a type past kMaxElements is an error where it is written
    } catch (const Error& e) {
      throw Error(e.message(), start);
    }
    return t;
  }

  PendingFn function() {
    if (peek().kind != Tok::Ident || peek().text != "func") expected("'func'");
    ++p_;
    PendingFn f;
    f.name = expectKind(Tok::Func, "a function name '@name'");
    expect("(");
    if (!isPunct(")")) {
      do {
        Named n = expectKind(Tok::Value, "a parameter '%name'");
        expect(":");
        f.params.push_back({n, type()});
      } while (accept(","));
    }
    expect(")");
    expect("->");
    expect("(");
    if (!isPunct(")")) {
      do f.results.push_back(type());
      while (accept(","));
    }
    expect(")");
    expect("{");
    for (;;) {
      if (peek().kind == Tok::Ident && peek().text == "return") {
        PendingOp r;
        r.isReturn = true;
        r.loc = next().loc;
        if (peek().kind == Tok::Value) {
          do r.operands.push_back(expectKind(Tok::Value, "a value '%name'"));
          while (accept(","));
        }
        f.body.push_back(std::move(r));
        expect("}");
        return f;
      }
      if (peek().kind == Tok::End || isPunct("}")) expected("'return'");
      f.body.push_back(op());
    }
  }

  PendingOp op() {
    PendingOp o;
    o.loc = peek().loc;
    if (peek().kind == Tok::Value) {
      do o.results.push_back(expectKind(Tok::Value, "a result '%name'"));
      while (accept(","));
      expect("=");
    }
    if (peek().kind != Tok::Ident) expected("an op name");
    o.mnemonic = next().text;
    while (peek().kind == Tok::Func) {
      o.callees.push_back(expectKind(Tok::Func, "a function '@name'"));
      accept(",");
    }
    expect("(");
    if (!isPunct(")")) {
      do o.operands.push_back(expectKind(Tok::Value, "an operand '%name'"));
      while (accept(","));
    }
    expect(")");
    if (accept("{")) {
      if (!isPunct("}")) {
        do {
          Named key = expectKind(Tok::Ident, "an attribute name");
          if (o.attrs.has(key.name)) throw Error("attribute '" + key.name + "' given twice", key.loc);
          expect("=");
          o.attrs.set(key.name, attr());
        } while (accept(","));
      }
      expect("}");
    }
    if (accept(":")) {
      do o.types.push_back(type());
      while (accept(","));
    }
    if (peek().kind == Tok::Loc) o.srcLoc = parseLoc(next());
    return o;
  }

  Location parseLoc(const Token& t) {
    Lexer lx(t.text, t.loc.file);
    std::vector<Token> toks = lx.run();
    // loc ( "file" : line : col )
    auto bad = [&] { return Error("malformed location comment, expected loc(\"file\":line:col)", t.loc); };
    if (toks.size() < 8 || toks[0].text != "loc" || toks[1].text != "(" || toks[2].kind != Tok::String ||
        toks[3].text != ":" || toks[4].kind != Tok::Int || toks[5].text != ":" || toks[6].kind != Tok::Int ||
        toks[7].text != ")")
      throw bad();
    auto number = [&](const Token& n) {
      errno = 0;
      const unsigned long long v = std::strtoull(n.text.c_str(), nullptr, 10);
      if (errno == ERANGE || v > std::numeric_limits<uint32_t>::max())
        throw Error("location line or column " + n.text + " is out of range (at most 4294967295)", t.loc);
      return static_cast<uint32_t>(v);
    };
    return {toks[2].text, number(toks[4]), number(toks[6])};
  }

  double number() {
    Token t = next();
    if (t.kind == Tok::Int || t.kind == Tok::Float) return std::strtod(t.text.c_str(), nullptr);
    if (t.kind == Tok::Ident && t.text == "nan") return std::nan("");
    if (t.kind == Tok::Ident && t.text == "inf") return HUGE_VAL;
    --p_;
    expected("a number");
  }

  Array dense() {
    expect("<");
    Type t = type();
    const int64_t size = t.size();
    expect(",");
    expect("[");
    // The values are read first: the array is allocated once their count is
    // known to be right, so a huge type with one value costs nothing.
    std::string bytes;
    int64_t n = 0;
    auto put = [&bytes](auto v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); };
    if (!isPunct("]")) {
      do {
        Location at = peek().loc;
        if (n >= size) throw Error(fmt::format("dense array of type {} has more than {} elements", t.str(), size), at);
        if (t.dtype == DType::i1) {
          Named b = expectKind(Tok::Ident, "true or false");
          if (b.name != "true" && b.name != "false") throw Error("expected true or false, found '" + b.name + "'", b.loc);
          put(static_cast<uint8_t>(b.name == "true"));
        } else if (t.dtype == DType::f32) {
          std::string s = peek().text;
          double d = number();
          put((std::isnan(d) || std::isinf(d)) ? static_cast<float>(d) : std::strtof(s.c_str(), nullptr));
        } else if (t.dtype == DType::f64) {
          put(number());
        } else {
          int64_t v = integer();
          if (t.dtype == DType::i32) {
            if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
              throw Error(fmt::format("integer {} is out of range for i32", v), at);
            put(static_cast<int32_t>(v));
          } else {
            put(v);
          }
        }
        ++n;
      } while (accept(","));
    }
    if (n != size) throw Error(fmt::format("dense array of type {} needs {} elements, got {}", t.str(), size, n), peek().loc);
    expect("]");
    expect(">");
    Array a = Array::uninitialized(t);
    if (!bytes.empty()) std::memcpy(a.raw(), bytes.data(), bytes.size());
    return a;
  }

  Attr attr() {
    const Token& t = peek();
    if (isPunct("[")) {
      ++p_;
      std::vector<int64_t> v;
      if (!isPunct("]")) {
        do v.push_back(integer());
        while (accept(","));
      }
      expect("]");
      return v;
    }
    if (t.kind == Tok::Int) return integer();
    if (t.kind == Tok::Float) return number();
    if (t.kind == Tok::String) return next().text;
    if (t.kind == Tok::Ident) {
      if (t.text == "true" || t.text == "false") return next().text == "true";
      if (t.text == "nan" || t.text == "inf") return number();
      if (t.text == "dense") {
        ++p_;
        return dense();
      }
      return dtype();
    }
    expected("an attribute value");
  }

  void body(Module& m, Function& f, const PendingFn& pf) {
    std::map<std::string, ValueId> values;
    auto define = [&](const Named& n, ValueId v) {
      if (!values.emplace(n.name, v).second) throw Error("redefinition of value %" + n.name, n.loc);
    };
    auto use = [&](const Named& n) {
      auto it = values.find(n.name);
      if (it == values.end()) throw Error("use of undefined value %" + n.name, n.loc);
      return it->second;
    };
    Builder b(m, f);
    for (const auto& [n, t] : pf.params) define(n, b.param(t));
    for (const PendingOp& o : pf.body) {
      std::vector<ValueId> operands;
      for (const Named& n : o.operands) operands.push_back(use(n));
      if (o.isReturn) {
        if (operands.size() != pf.results.size())
          throw Error(fmt::format("@{} returns {} values, but its signature declares {}", f.name, operands.size(),
                                  pf.results.size()), o.loc);
        for (std::size_t i = 0; i < operands.size(); ++i)
          if (f.type(operands[i]) != pf.results[i])
            throw Error(fmt::format("return value {} of @{} has type {}, but the signature declares {}", i, f.name,
                                    f.type(operands[i]).str(), pf.results[i].str()), o.operands[i].loc);
        b.ret(operands);
        continue;
      }
      auto kind = ir::lookup(o.mnemonic);
      if (!kind) throw Error("unknown op '" + o.mnemonic + "'", o.loc);
      std::vector<std::string> callees;
      for (const Named& c : o.callees) callees.push_back(c.name);
      std::vector<Type> inferred = inferTypes(m, f, *kind, operands, o.attrs, callees, o.loc);
      if (inferred.size() != o.results.size())
        throw Error(fmt::format("{}: produces {} result{}, but {} {} named", o.mnemonic, inferred.size(),
                                inferred.size() == 1 ? "" : "s", o.results.size(), o.results.size() == 1 ? "is" : "are"), o.loc);
      if (o.types.size() != inferred.size())
        throw Error(fmt::format("{}: expected {} result type{} after ':', got {}", o.mnemonic, inferred.size(),
                                inferred.size() == 1 ? "" : "s", o.types.size()), o.loc);
      for (std::size_t i = 0; i < inferred.size(); ++i)
        if (inferred[i] != o.types[i])
          throw Error(fmt::format("{}: result {} has type {}, but {} is written", o.mnemonic, i, inferred[i].str(),
                                  o.types[i].str()), o.loc);
      // Errors raised later (a VJP rule, a loop's limit at run time) name the
      // op's `; loc(...)`. Text without such comments (written by hand, or
      // printed without locations) gives each op its position in the text;
      // text with them keeps ops that have none without one, so it prints back the same.
      Location loc = o.srcLoc.known() ? o.srcLoc : annotated_ ? Location{} : o.loc;
      auto results = b.create(*kind, operands, o.attrs, callees, loc);
      for (std::size_t i = 0; i < results.size(); ++i) define(o.results[i], results[i]);
    }
  }

  std::vector<Token> t_;
  std::size_t p_ = 0;
  bool annotated_ = false; ///< some op has a `; loc(...)` comment
};

} // namespace

std::unique_ptr<Module> parse(std::string_view text, std::string_view filename) {
  Lexer lx(text, std::string(filename));
  return Parser(lx.run()).run();
}

Type parseType(std::string_view text, std::string_view filename, uint32_t column) {
  Lexer lx(text, std::string(filename), column);
  return Parser(lx.run()).typeOnly();
}

} // namespace adjit::ir
