-- zklock.testing.config: where java and ZooKeeper live, JVM options, the port range. One table,
-- shared by every zklock.testing module (testing.config is this table): change it before use.
return {
  java = os.getenv("ZKLOCK_JAVA") or "java",
  zookeeper_jar = "/usr/share/java/zookeeper.jar",
  conf_dir = "/etc/zookeeper/conf",
  slf4j_jar = "/usr/share/java/slf4j-simple.jar",   -- added to the class path if present
  jvm_opts = { "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true" },
  stop_timeout = 10,                               -- s: SIGTERM grace before SIGKILL
  port_min = 20000, port_max = 40000,
  python = os.getenv("ZKLOCK_PYTHON") or "python3", -- runs the fault proxy (zklock.testing.net)
  net_fault_max = 120,                             -- s: a network fault heals by itself after this
}
