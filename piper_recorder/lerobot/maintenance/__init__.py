"""Tools that rewrite or add to a saved root, each behind its own console command; imports ``format`` and ``writer``.

``retime`` (``piper-repair``: video PTS and row timestamps onto the grid), ``recover`` (``piper-recover``: a root
the writer refuses as damaged) and ``action_stats`` (``piper-finalize``: relative and delta action statistics).
"""
