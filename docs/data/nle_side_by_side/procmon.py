"""Samples a command's whole process tree every 5 s: CPU cores used, summed RSS and PSS."""
import csv, subprocess, sys, time
import psutil

out = sys.argv[1]
cmd = sys.argv[2:]
p = subprocess.Popen(cmd)
root = psutil.Process(p.pid)
t0 = time.time()
with open(out, 'w', newline='') as f:
  w = csv.writer(f)
  w.writerow(['t', 'cpu_cores', 'rss_mib', 'pss_mib', 'procs'])
  last_cpu = 0.0
  last_t = t0
  while p.poll() is None:
    time.sleep(5)
    try:
      procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
      break
    cpu = rss = pss = 0.0
    for q in procs:
      try:
        ct = q.cpu_times()
        cpu += ct.user + ct.system + ct.children_user + ct.children_system
        mi = q.memory_full_info()
        rss += mi.rss
        pss += mi.pss
      except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    now = time.time()
    w.writerow([round(now - t0, 1), round((cpu - last_cpu) / (now - last_t), 3),
                round(rss / 2**20, 1), round(pss / 2**20, 1), len(procs)])
    f.flush()
    last_cpu, last_t = cpu, now
sys.exit(p.wait())
