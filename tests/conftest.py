

def pytest_configure(config):
    config.addinivalue_line("markers", "twins: needs a Docker engine to boot Spark twins")
