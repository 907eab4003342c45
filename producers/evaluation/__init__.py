"""Measuring retrieval: ``evaluate`` (pass@k, MRR, reports and charts), ``suites`` (several
corpora judged at once), ``tuning`` (``situate tune``: search settings chosen on the user's
labelled queries).
"""
