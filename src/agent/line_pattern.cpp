#include "agent/line_pattern.hpp"

#include <cstdio>
#include <memory>

namespace agent {

namespace {

using byte_set = std::array<std::uint64_t, 4>;

void add(byte_set& s, unsigned char c) {
    s[c >> 6] |= std::uint64_t{1} << (c & 63);
}
void add_range(byte_set& s, unsigned char lo, unsigned char hi) {
    for (unsigned c = lo; c <= hi; ++c)
        add(s, static_cast<unsigned char>(c));
}
bool has(const byte_set& s, unsigned char c) {
    return (s[c >> 6] >> (c & 63)) & 1;
}
void invert(byte_set& s) {
    for (auto& w : s)
        w = ~w;
}

// \d \w \s (and their upper-case complements) into `s`; false for another letter.
bool class_escape(char e, byte_set& s) {
    byte_set c{};
    switch (e | 0x20) {
    case 'd':
        add_range(c, '0', '9');
        break;
    case 'w':
        add_range(c, '0', '9');
        add_range(c, 'a', 'z');
        add_range(c, 'A', 'Z');
        add(c, '_');
        break;
    case 's':
        for (const char w : {' ', '\t', '\n', '\r', '\f', '\v'})
            add(c, static_cast<unsigned char>(w));
        break;
    default:
        return false;
    }
    if (e >= 'A' && e <= 'Z')
        invert(c);
    for (std::size_t i = 0; i < 4; ++i)
        s[i] |= c[i];
    return true;
}

bool punctuation(char c) {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~') || c == ' ';
}

struct node {
    enum class kind { empty, byte, any, set, bol, eol, concat, alt, repeat } k = kind::empty;
    unsigned char byte = 0;
    std::uint32_t set = 0;
    int min = 0, max = 0; // repeat; max -1: no bound
    std::vector<std::unique_ptr<node>> kids;
};

} // namespace

class pattern_compiler {
public:
    explicit pattern_compiler(std::string_view p)
        : p_(p) {}

    std::variant<line_pattern, std::string> run() {
        if (p_.size() > line_pattern::max_pattern)
            return "the pattern is longer than " + std::to_string(line_pattern::max_pattern) +
                   " bytes";
        auto tree = alternation(0);
        if (!error_.empty())
            return error_;
        if (at_ < p_.size())
            return std::string("unbalanced ')'");
        emit(*tree);
        push({line_pattern::op::match});
        if (!error_.empty())
            return error_;
        return std::move(out_);
    }

private:
    using op = line_pattern::op;

    std::unique_ptr<node> fail(std::string why) {
        if (error_.empty())
            error_ = std::move(why);
        return std::make_unique<node>();
    }

    std::unique_ptr<node> alternation(int depth) {
        if (depth > 100)
            return fail("groups nested deeper than 100");
        auto first = concatenation(depth);
        if (at_ >= p_.size() || p_[at_] != '|')
            return first;
        auto alt = std::make_unique<node>();
        alt->k = node::kind::alt;
        alt->kids.push_back(std::move(first));
        while (error_.empty() && at_ < p_.size() && p_[at_] == '|') {
            ++at_;
            alt->kids.push_back(concatenation(depth));
        }
        return alt;
    }

    std::unique_ptr<node> concatenation(int depth) {
        auto cat = std::make_unique<node>();
        cat->k = node::kind::concat;
        while (error_.empty() && at_ < p_.size() && p_[at_] != '|' && p_[at_] != ')') {
            const char c = p_[at_];
            if (c == '*' || c == '+' || c == '?' || (c == '{' && digit_after(at_)))
                return fail("nothing to repeat before '" + std::string(1, c) + "'");
            auto a = atom(depth);
            while (error_.empty() && at_ < p_.size())
                if (!quantified(a))
                    break;
            cat->kids.push_back(std::move(a));
        }
        return cat;
    }

    bool digit_after(std::size_t i) const {
        return i + 1 < p_.size() && p_[i + 1] >= '0' && p_[i + 1] <= '9';
    }

    // A quantifier after `a` wraps it; false when none follows.
    bool quantified(std::unique_ptr<node>& a) {
        int min = 0, max = -1;
        const char c = p_[at_];
        if (c == '*') {
            ++at_;
        } else if (c == '+') {
            min = 1;
            ++at_;
        } else if (c == '?') {
            max = 1;
            ++at_;
        } else if (c == '{' && digit_after(at_)) {
            ++at_;
            min = number();
            max = min;
            if (at_ < p_.size() && p_[at_] == ',') {
                ++at_;
                max = at_ < p_.size() && p_[at_] >= '0' && p_[at_] <= '9' ? number() : -1;
            }
            if (at_ >= p_.size() || p_[at_] != '}') {
                fail("a repetition {m,n} without its '}'");
                return false;
            }
            ++at_;
            if (min > line_pattern::max_repeat || max > line_pattern::max_repeat ||
                (max >= 0 && max < min)) {
                fail("a repetition {m,n} needs m <= n <= " +
                     std::to_string(line_pattern::max_repeat));
                return false;
            }
        } else {
            return false;
        }
        auto r = std::make_unique<node>();
        r->k = node::kind::repeat;
        r->min = min;
        r->max = max;
        r->kids.push_back(std::move(a));
        a = std::move(r);
        return true;
    }

    int number() {
        int n = 0;
        while (at_ < p_.size() && p_[at_] >= '0' && p_[at_] <= '9' && n <= 1000)
            n = n * 10 + (p_[at_++] - '0');
        return n;
    }

    std::unique_ptr<node> leaf(node::kind k) {
        auto n = std::make_unique<node>();
        n->k = k;
        return n;
    }
    std::unique_ptr<node> byte(unsigned char c) {
        auto n = leaf(node::kind::byte);
        n->byte = c;
        return n;
    }
    std::unique_ptr<node> set(const byte_set& s) {
        auto n = leaf(node::kind::set);
        n->set = static_cast<std::uint32_t>(out_.sets_.size());
        out_.sets_.push_back(s);
        return n;
    }

    std::unique_ptr<node> atom(int depth) {
        const char c = p_[at_++];
        switch (c) {
        case '(': {
            auto inside = alternation(depth + 1);
            if (at_ >= p_.size() || p_[at_] != ')')
                return fail("unbalanced '('");
            ++at_;
            return inside;
        }
        case '.':
            return leaf(node::kind::any);
        case '^':
            return leaf(node::kind::bol);
        case '$':
            return leaf(node::kind::eol);
        case '[':
            return bracket();
        case '\\':
            return escape();
        default:
            return byte(static_cast<unsigned char>(c));
        }
    }

    std::unique_ptr<node> escape() {
        if (at_ >= p_.size())
            return fail("a '\\' at the end");
        const char e = p_[at_++];
        byte_set s{};
        if (class_escape(e, s))
            return set(s);
        if (e >= '1' && e <= '9')
            return fail("back-references (\\" + std::string(1, e) + ") are not supported");
        if (e == 't')
            return byte('\t');
        if (e == 'n')
            return byte('\n');
        if (e == 'r')
            return byte('\r');
        if (punctuation(e))
            return byte(static_cast<unsigned char>(e));
        return fail("unknown escape \\" + std::string(1, e));
    }

    // After '[': the set up to its ']'.
    std::unique_ptr<node> bracket() {
        byte_set s{};
        bool negate = false;
        if (at_ < p_.size() && p_[at_] == '^') {
            negate = true;
            ++at_;
        }
        bool first = true;
        while (true) {
            if (at_ >= p_.size())
                return fail("a '[' without its ']'");
            char c = p_[at_];
            if (c == ']' && !first) {
                ++at_;
                break;
            }
            first = false;
            if (c == '[' && at_ + 1 < p_.size() && p_[at_ + 1] == ':') {
                const auto end = p_.find(":]", at_ + 2);
                if (end == std::string_view::npos)
                    return fail("a '[:' without its ':]'");
                if (!named_class(p_.substr(at_ + 2, end - at_ - 2), s))
                    return fail(
                        "unknown class [:" + std::string(p_.substr(at_ + 2, end - at_ - 2)) + ":]");
                at_ = end + 2;
                continue;
            }
            ++at_;
            unsigned char lo = static_cast<unsigned char>(c);
            if (c == '\\') {
                if (at_ >= p_.size())
                    return fail("a '\\' at the end");
                const char e = p_[at_++];
                if (class_escape(e, s))
                    continue;
                if (e == 't' || e == 'n' || e == 'r')
                    lo = e == 't' ? '\t' : e == 'n' ? '\n' : '\r';
                else if (punctuation(e))
                    lo = static_cast<unsigned char>(e);
                else
                    return fail("unknown escape \\" + std::string(1, e));
            }
            if (at_ + 1 < p_.size() && p_[at_] == '-' && p_[at_ + 1] != ']') {
                unsigned char hi = static_cast<unsigned char>(p_[at_ + 1]);
                at_ += 2;
                if (hi == '\\') {
                    if (at_ >= p_.size() || !punctuation(p_[at_]))
                        return fail("a range's end must be a character");
                    hi = static_cast<unsigned char>(p_[at_++]);
                }
                if (hi < lo)
                    return fail("a range from '" + std::string(1, static_cast<char>(lo)) +
                                "' down to '" + std::string(1, static_cast<char>(hi)) + "'");
                add_range(s, lo, hi);
            } else {
                add(s, lo);
            }
        }
        if (negate)
            invert(s);
        return set(s);
    }

    static bool named_class(std::string_view name, byte_set& s) {
        if (name == "digit")
            return class_escape('d', s);
        if (name == "space")
            return class_escape('s', s);
        if (name == "alpha" || name == "alnum" || name == "upper" || name == "lower" ||
            name == "xdigit") {
            if (name == "alpha" || name == "alnum" || name == "upper")
                add_range(s, 'A', 'Z');
            if (name == "alpha" || name == "alnum" || name == "lower")
                add_range(s, 'a', 'z');
            if (name == "alnum" || name == "xdigit")
                add_range(s, '0', '9');
            if (name == "xdigit") {
                add_range(s, 'a', 'f');
                add_range(s, 'A', 'F');
            }
            return true;
        }
        if (name == "punct") {
            for (unsigned c = '!'; c <= '~'; ++c)
                if (punctuation(static_cast<char>(c)))
                    add(s, static_cast<unsigned char>(c));
            return true;
        }
        return false;
    }

    std::uint32_t push(line_pattern::inst i) {
        if (out_.program_.size() >= line_pattern::max_program) {
            if (error_.empty())
                error_ = "the pattern makes more than " +
                         std::to_string(line_pattern::max_program) +
                         " steps (its repetitions multiply)";
            return static_cast<std::uint32_t>(out_.program_.size());
        }
        out_.program_.push_back(i);
        return static_cast<std::uint32_t>(out_.program_.size() - 1);
    }
    std::uint32_t here() const { return static_cast<std::uint32_t>(out_.program_.size()); }
    void patch_x(std::uint32_t at, std::uint32_t to) {
        if (at < out_.program_.size())
            out_.program_[at].x = to;
    }
    void patch_y(std::uint32_t at, std::uint32_t to) {
        if (at < out_.program_.size())
            out_.program_[at].y = to;
    }

    void emit(const node& n) {
        // (Counted too: a repetition of a part that makes no step, ((){100}){100}…, would
        // otherwise be walked without end.)
        if (++emitted_ > 16 * line_pattern::max_program && error_.empty())
            error_ = "the pattern makes more than " + std::to_string(line_pattern::max_program) +
                     " steps (its repetitions multiply)";
        if (!error_.empty())
            return;
        switch (n.k) {
        case node::kind::empty:
            return;
        case node::kind::byte:
            push({op::byte, n.byte});
            return;
        case node::kind::any:
            push({op::any});
            return;
        case node::kind::set:
            push({op::set, 0, n.set});
            return;
        case node::kind::bol:
            push({op::bol});
            return;
        case node::kind::eol:
            push({op::eol});
            return;
        case node::kind::concat:
            for (const auto& k : n.kids)
                emit(*k);
            return;
        case node::kind::alt: {
            std::vector<std::uint32_t> jumps;
            for (std::size_t i = 0; i < n.kids.size(); ++i) {
                if (i + 1 < n.kids.size()) {
                    const auto split = push({op::split});
                    patch_x(split, here());
                    emit(*n.kids[i]);
                    jumps.push_back(push({op::jump}));
                    patch_y(split, here());
                } else {
                    emit(*n.kids[i]);
                }
            }
            for (const auto j : jumps)
                patch_x(j, here());
            return;
        }
        case node::kind::repeat: {
            const auto& body = *n.kids[0];
            for (int i = 0; i < n.min && error_.empty(); ++i)
                emit(body);
            if (n.max < 0) { // L: split B, out; B: body; jump L; out:
                const auto loop = push({op::split});
                patch_x(loop, here());
                emit(body);
                const auto back = push({op::jump});
                patch_x(back, loop);
                patch_y(loop, here());
                return;
            }
            std::vector<std::uint32_t> splits; // each: split B, out
            for (int i = n.min; i < n.max && error_.empty(); ++i) {
                splits.push_back(push({op::split}));
                patch_x(splits.back(), here());
                emit(body);
            }
            for (const auto s : splits)
                patch_y(s, here());
            return;
        }
        }
    }

    std::string_view p_;
    std::size_t at_ = 0, emitted_ = 0;
    std::string error_;
    line_pattern out_;
};

std::variant<line_pattern, std::string> line_pattern::compile(std::string_view pattern) {
    return pattern_compiler(pattern).run();
}

bool line_pattern::matches(std::string_view line) const {
    if (line.size() > max_line)
        line = line.substr(0, max_line);
    const auto n = static_cast<std::uint32_t>(program_.size());
    std::vector<std::uint32_t> mark(n, 0), now, next, stack;
    std::uint32_t generation = 0;
    bool matched = false;
    // Every instruction reachable from `pc` without reading a byte, at `pos`, into `list`.
    const auto add = [&](std::vector<std::uint32_t>& list, std::uint32_t from, std::size_t pos) {
        stack.push_back(from);
        while (!stack.empty()) {
            const auto pc = stack.back();
            stack.pop_back();
            if (pc >= n || mark[pc] == generation)
                continue;
            mark[pc] = generation;
            const auto& i = program_[pc];
            switch (i.code) {
            case op::jump:
                stack.push_back(i.x);
                break;
            case op::split:
                stack.push_back(i.y);
                stack.push_back(i.x);
                break;
            case op::bol:
                if (pos == 0)
                    stack.push_back(pc + 1);
                break;
            case op::eol:
                if (pos == line.size())
                    stack.push_back(pc + 1);
                break;
            case op::match:
                matched = true;
                break;
            default:
                list.push_back(pc);
            }
        }
    };
    ++generation;
    add(now, 0, 0);
    for (std::size_t pos = 0; pos < line.size() && !matched; ++pos) {
        const auto c = static_cast<unsigned char>(line[pos]);
        ++generation;
        next.clear();
        for (const auto pc : now) {
            const auto& i = program_[pc];
            if ((i.code == op::byte && i.byte == c) || i.code == op::any ||
                (i.code == op::set && has(sets_[i.x], c)))
                add(next, pc + 1, pos + 1);
        }
        add(next, 0, pos + 1); // a match may begin anywhere
        now.swap(next);
    }
    return matched;
}

std::string line_pattern::listing() const {
    static constexpr const char* names[] = {"byte", "any", "set", "split",
                                            "jump", "bol", "eol", "match"};
    std::string out;
    char buf[160];
    for (std::size_t pc = 0; pc < program_.size(); ++pc) {
        const auto& i = program_[pc];
        const auto name = names[static_cast<int>(i.code)];
        switch (i.code) {
        case op::byte:
            std::snprintf(buf, sizeof buf, "%zu %s %u\n", pc, name, i.byte);
            break;
        case op::set: {
            const auto& s = sets_[i.x];
            std::snprintf(
                buf, sizeof buf, "%zu %s %016llx%016llx%016llx%016llx\n", pc, name,
                static_cast<unsigned long long>(s[3]), static_cast<unsigned long long>(s[2]),
                static_cast<unsigned long long>(s[1]), static_cast<unsigned long long>(s[0]));
            break;
        }
        case op::split:
            std::snprintf(buf, sizeof buf, "%zu %s %u %u\n", pc, name, i.x, i.y);
            break;
        case op::jump:
            std::snprintf(buf, sizeof buf, "%zu %s %u\n", pc, name, i.x);
            break;
        default:
            std::snprintf(buf, sizeof buf, "%zu %s\n", pc, name);
        }
        out += buf;
    }
    return out;
}

} // namespace agent
