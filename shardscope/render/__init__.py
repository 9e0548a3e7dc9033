"""Renderings of an analysis: plain text, rich tables, findings, the report, JSON, the diff,
and writing them to files."""

from shardscope.render.inspections import register

register()
