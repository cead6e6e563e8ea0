"""Reading the dashboard's HTML the way the browser test reads the DOM: by class and data-*."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"br", "img", "input", "meta", "link", "hr", "col", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def find_all(self, cls: str | None = None, tag: str | None = None) -> list[Node]:
        found = []
        for child in self.children:
            if (cls is None or cls in child.classes) and (tag is None or child.tag == tag):
                found.append(child)
            found.extend(child.find_all(cls, tag))
        return found

    def cell(self, col: str) -> str:
        [td] = [c for c in self.find_all(tag="td") if c.attrs.get("data-col") == col]
        return td.all_text()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1:
            node = self.stack.pop()
            if node.tag == tag:
                break

    def handle_data(self, data: str) -> None:
        target = self.stack[-1]
        if target.children:
            target.children.append(Node("#text", {}, text=data))
        else:
            target.text += data


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
