#!/usr/bin/env python3
"""The shape of switchyard's code at a git revision: functions over 80 lines in `src/`, the
lines of the store files, and import cycles among `src/` files.

    python3 scripts/code-shape.py [REV ...]     (default: the work tree)

How it counts, so that two revisions are compared the same way:

* Comments, strings and `#[cfg(test)] mod … { … }` blocks are left out before anything is
  measured. A function runs from its `fn` line to its closing brace (brace matching).
* An import is a reference from one file to an item defined in another: a `use` (its tree
  expanded) or a path written in the code (`crate::…`, `super::…`, `self::…`, or a path whose
  first segment a `use` or a `mod` of the file names). The path is resolved to the file that
  defines the item, following `pub use` re-exports. `mod x;` declarations and `pub use`
  re-exports are the module tree, not imports, and make no edge themselves.
* A cycle is a strongly connected component of that graph with more than one file.
"""

import re
import subprocess
import sys
from collections import defaultdict

LONG = 80


def files_at(rev):
    if rev is None:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "src"],
                             capture_output=True, text=True, check=True).stdout
        names = [n for n in out.split() if n.endswith(".rs")]
        result = {}
        for n in names:
            try:
                with open(n, encoding="utf-8") as f:
                    result[n] = f.read()
            except FileNotFoundError:
                pass
        return result
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"],
                         capture_output=True, text=True, check=True).stdout
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], capture_output=True, text=True,
                              check=True).stdout
            for n in out.split() if n.endswith(".rs")}


def strip(src):
    """The source with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif re.match(r'b?r#*"', src[i:i + 8]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", src[i + 2:j]))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + re.sub(r"[^\n]", " ", src[i + 2:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", src[i:])
            if m:
                out.append("' '" + " " * (m.end() - 3))
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def without_tests(text):
    """Blanks `#[cfg(test)]` modules."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            return text
        end = matching(text, m.end() - 1)
        text = text[:m.start()] + re.sub(r"[^\n]", " ", text[m.start():end + 1]) + text[end + 1:]


def functions(text):
    """(name, first line, lines) of every function with a body."""
    found = []
    for m in re.finditer(r"\bfn\s+([A-Za-z_]\w*)", text):
        depth, j = 0, m.end()
        while j < len(text):
            ch = text[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1 if not (ch == ">" and text[j - 1] == "-") else 0
            elif ch == ";" and depth <= 0:
                break
            elif ch == "{" and depth <= 0:
                end = matching(text, j)
                first = text.count("\n", 0, m.start()) + 1
                last = text.count("\n", 0, end) + 1
                found.append((m.group(1), first, last - first + 1))
                break
            j += 1
    return found


def module_of(path):
    parts = path[len("src/"):-len(".rs")].split("/")
    if parts == ["lib"] or parts == ["main"]:
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def expand(tree):
    tree = re.sub(r"\s+", " ", tree.strip())
    out = []

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur.strip())
        return parts

    def walk(prefix, s):
        s = s.strip()
        brace = s.find("{")
        if brace >= 0:
            head = s[:brace].rstrip(":").strip()
            segs = [x.strip() for x in head.split("::") if x.strip()]
            body = s[brace + 1:s.rfind("}")]
            for part in split_top(body):
                walk(prefix + segs, part)
            return
        m = re.match(r"^(.*?)(?:\s+as\s+(\w+))?$", s)
        segs = [x.strip() for x in m.group(1).split("::") if x.strip()]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        if segs:
            out.append((prefix + segs, m.group(2) or segs[-1]))

    walk([], tree)
    return out


class Crate:
    def __init__(self, sources):
        self.text = {p: without_tests(strip(s)) for p, s in sources.items()}
        self.modules = {}
        for p in self.text:
            if p != "src/main.rs":
                self.modules[module_of(p)] = p
        self.defined = {}
        self.uses = {}
        for p, t in self.text.items():
            names = set(re.findall(
                r"\b(?:struct|enum|trait|type|fn|const|static|union|macro_rules!)\s+([A-Za-z_]\w*)", t))
            names |= set(re.findall(r"\bmod\s+([A-Za-z_]\w*)\s*[;{]", t))
            self.defined[p] = names
            entries = []
            for m in re.finditer(r"(\bpub(\s*\([^)]*\))?\s+)?\buse\s+([^;]+);", t):
                reexport = m.group(1) is not None and "super" not in (m.group(2) or "")
                for segs, alias in expand(m.group(3)):
                    entries.append((reexport, segs, alias, m.start(), m.end()))
            self.uses[p] = entries

    def absolute(self, path, segs):
        """Segments relative to `path`'s module made absolute (None for other crates)."""
        here = list(module_of(path))
        segs = list(segs)
        if path == "src/main.rs" and segs and segs[0] == "switchyard":
            return segs[1:]
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("self", "super"):
            base = here
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return base + segs
        child = tuple(here + [segs[0]])
        if child in self.modules and path != "src/main.rs":
            return here + segs
        return None

    def resolve(self, segs, seen=None):
        """The file defining the item at absolute `segs` (following re-exports)."""
        seen = seen or set()
        key = tuple(segs)
        if key in seen:
            return None
        seen.add(key)
        # longest module prefix
        for k in range(len(segs), -1, -1):
            mod = tuple(segs[:k])
            if mod in self.modules:
                break
        else:
            return None
        file = self.modules[mod]
        rest = segs[k:]
        if not rest:
            return file
        name = rest[0]
        for reexport, usegs, alias, _, _ in self.uses[file]:
            if alias == name or (usegs and usegs[-1] == "*"):
                target = self.absolute(file, usegs[:-1] + [name] if usegs[-1] == "*" else usegs)
                if target is None:
                    continue
                hit = self.resolve(target + rest[1:], seen)
                if hit:
                    return hit
        return file

    def edges(self):
        graph = defaultdict(set)
        for p, t in self.text.items():
            aliases = {}
            for reexport, segs, alias, start, end in self.uses[p]:
                target = self.absolute(p, segs)
                if target is None:
                    continue
                if alias != "*":
                    aliases[alias] = target
                if reexport:
                    continue
                if segs[-1] == "*":
                    hit = self.resolve(target[:-1])
                else:
                    hit = self.resolve(target)
                if hit and hit != p:
                    graph[p].add(hit)
            body = t
            for _, _, _, start, end in self.uses[p]:
                body = body[:start] + " " * (end - start) + body[end:]
            for m in re.finditer(r"(?<![\w:])((?:[A-Za-z_]\w*)(?:::[A-Za-z_]\w*)+)", body):
                segs = m.group(1).split("::")
                if segs[0] in ("crate", "self", "super") or (p == "src/main.rs" and segs[0] == "switchyard"):
                    target = self.absolute(p, segs)
                elif segs[0] in aliases:
                    target = aliases[segs[0]] + segs[1:]
                else:
                    target = self.absolute(p, segs)
                if target is None:
                    continue
                hit = self.resolve(target)
                if hit and hit != p:
                    graph[p].add(hit)
        return graph


def cycles(graph, nodes):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def report(rev):
    sources = files_at(rev)
    crate = Crate(sources)
    label = rev or "work tree"
    print(f"## {label}")
    total_fns, long_fns = 0, []
    for p in sorted(crate.text):
        for name, line, length in functions(crate.text[p]):
            total_fns += 1
            if length > LONG:
                long_fns.append((length, f"{p}:{line} {name}"))
    long_fns.sort(reverse=True)
    code_lines = sum(len([l for l in t.splitlines() if l.strip()]) for t in crate.text.values())
    print(f"files in src/: {len(sources)}; lines: {sum(s.count(chr(10)) for s in sources.values())} "
          f"(code, without comments, blank lines and test modules: {code_lines})")
    print(f"functions: {total_fns}; over {LONG} lines: {len(long_fns)} ({100 * len(long_fns) / max(total_fns, 1):.1f} %)")
    for length, where in long_fns:
        print(f"  {length:4d}  {where}")
    for store in ("src/store/sqlite.rs", "src/store/postgres.rs"):
        if store in sources:
            print(f"{store}: {sources[store].count(chr(10))} lines")
    graph = crate.edges()
    found = cycles(graph, crate.text.keys())
    print(f"import cycles among src/ files: {len(found)}")
    for comp in found:
        inner = sorted(f"{a} -> {b}" for a in comp for b in graph.get(a, ()) if b in comp)
        print(f"  {len(comp)} files: {', '.join(comp)}")
        for edge in inner:
            print(f"      {edge}")
    print()


if __name__ == "__main__":
    for rev in sys.argv[1:] or [None]:
        report(rev)
