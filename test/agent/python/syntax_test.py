"""The Python agent stays runnable on Python 3.5: its syntax parses as 3.5, and it calls
nothing from the standard library that appeared after 3.5.

    python3 test/agent/python/syntax_test.py src/agent/python/perfwire_agent.py
"""
import ast
import sys

# Names and attributes that came after 3.5 (or whose 3.5 form differs).
FORBIDDEN_MODULES = {"secrets", "dataclasses", "contextvars", "graphlib", "zoneinfo", "tomllib"}
FORBIDDEN_KEYWORDS = {"capture_output", "text"}  # subprocess.run(..., capture_output=, text=)
FORBIDDEN_ATTRIBUTES = {"fromisoformat", "removeprefix", "removesuffix", "isascii"}


def problems(source):
    tree = ast.parse(source, feature_version=(3, 5))  # f-strings, annotations, walrus fail here
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append("line %d: import %s" % (node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                found.append("line %d: from %s import" % (node.lineno, node.module))
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in FORBIDDEN_KEYWORDS and getattr(node.func, "attr", "") == "run":
                    found.append("line %d: run(%s=...)" % (node.lineno, kw.arg))
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append("line %d: .%s" % (node.lineno, node.attr))
    return found


def main():
    path = sys.argv[1]
    with open(path) as f:
        source = f.read()
    try:
        found = problems(source)
    except SyntaxError as e:
        print("%s: not Python 3.5: %s" % (path, e))
        return 1
    # The check itself must catch what it is for.
    for bad in ('x = f"{1}"\n', "x: int = 1\n", "import secrets\n",
                "subprocess.run(['a'], capture_output=True)\n"):
        try:
            if not problems(bad):
                print("the check misses: %r" % bad)
                return 1
        except SyntaxError:
            pass
    for p in found:
        print("%s: %s" % (path, p))
    print("%s: %s" % (path, "Python 3.5 compatible" if not found else "not 3.5 compatible"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
