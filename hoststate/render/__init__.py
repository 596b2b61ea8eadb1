"""The presentation layer: every text hoststate shows a person, and the JSON and Markdown of its reports.

``text`` holds the primitives (terminal width, escaping, fitting, colour, tables, Markdown); each other module
renders one output kind from plain data another layer computed, chosen by format in its ``RENDERERS`` table:

- ``findings``: one diff finding or one rule's findings as lines; ``summary``: one line per subsystem;
  ``sources``: the line saying the two sides describe vLLM differently;
- ``diff``: ``hoststate diff``'s report; ``guard``: guard's and rebaseline's report on stderr;
- ``show``, ``check``, ``fleet``, ``results``: those commands' reports; ``timeline``: a watched run drawn (SVG).

Renderers never decide: a verdict, a count or an advisory comes from the layer below (hoststate.diff,
hoststate.guard, hoststate.check). ``show`` and ``check`` load no diff or policy module. Nothing here is imported
by this package's ``__init__``: a command pays only for the renderer it uses.
"""
