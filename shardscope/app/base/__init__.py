"""What the explorer's App, its views and its widgets all stand on, importing none of them: the
tabs and their keys (``tabs``, ``bindings``), the one contract between the App and a tab's view
(``analysis_view``), the run worker and the messages it posts (``runner``, ``messages``), when the
garbage collector runs (``gc_policy``), a plan's summary lines (``summaries``) and the Textual
privates relied on (``textual_adapter``)."""
