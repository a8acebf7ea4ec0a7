"""What the tests share: polling (``waiting.wait_for``), rigs, fakes and data factories.

Test modules import from here and never from one another (``test_module_graph`` keeps it so): a helper two
test files need lives in this package, named after what it is, not in one of the tests.
"""
