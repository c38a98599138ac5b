// Communicators: bootstrap over the store, the shared-memory segments, the
// two levels, split, destroy and abort, the thread's last error. Waiting for
// peers: rounds.cpp; the TCP transport: tcp.cpp.
//
// Vendor: this is your collectives library's job (NCCL's bootstrap, its
// shared-memory and network transports, its watchdog-visible async errors).
#include "collectives.h"
#include "internal.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace occl {

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

namespace {
thread_local std::string t_last_error;

std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    snprintf(b, sizeof(b), "%02x", p[i]);
    s += b;
  }
  return s;
}

std::string host_identity() {
  // Same boot of the same kernel: /proc/<pid>/fd of a peer is reachable.
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + id;
}

}  // namespace

occlResult_t set_last_error(occlResult_t r, const std::string& msg) {
  t_last_error = msg;
  return r;
}

}  // namespace occl

using namespace occl;

void occlComm::unmap_all() {
  close_ipc();
  for (size_t p = 0; p < peers.size(); ++p) {
    if (peers[p].base) munmap(peers[p].base, seg_bytes);
    if (peers[p].pidfd >= 0) close(peers[p].pidfd);
    if (peers[p].sock >= 0) close(peers[p].sock);
    peers[p] = Peer{};
  }
  if (memfd >= 0) close(memfd);
  memfd = -1;
  if (listen_fd >= 0) close(listen_fd);
  listen_fd = -1;
}

occlComm::~occlComm() {
  delete local;
  delete leaders;
  unmap_all();
}

// ------------------------------------------------------------ bootstrap
namespace {

// Zero copy needs device memory that peers can map: strict mode (a memfd
// per device). OCCL_ZERO_COPY=0 turns it off (every rank must agree, so a
// rank that turns it off turns it off for the communicator).
bool zero_copy_capable(int device) {
  const char* v = getenv("OCCL_ZERO_COPY");
  if (v && strcmp(v, "0") == 0) return false;
  if (v && *v && strcmp(v, "1") != 0)
    throw Error(occlInvalidArgument, format("OCCL_ZERO_COPY: expected 0 or 1, got '%s'", v));
  orDeviceProp prop;
  if (orGetDeviceProperties(&prop, device) != orSuccess) {
    orGetLastError();
    return false;
  }
  return prop.strictMemory != 0;
}

// [docs:occl-bootstrap]
// Each rank creates its segment as an anonymous memfd (mode 0600, owned by
// this process, never visible in /dev/shm: nothing to clean up when a rank
// dies, the kernel frees it with the last mapping) and publishes where to
// find it. A peer on the same host opens it through /proc/<pid>/fd/<fd>,
// which the kernel allows only for processes of the same user, and checks a
// random nonce in its header so a recycled pid cannot impersonate the rank.
std::string create_segment(occlComm* c) {
  c->seg_bytes = segment_bytes(c->nranks);
  c->memfd = int(syscall(SYS_memfd_create, "occl-segment", MFD_CLOEXEC));
  if (c->memfd < 0) throw Error(occlSystemError, format("memfd_create: %s", strerror(errno)));
  fchmod(c->memfd, 0600);
  if (ftruncate(c->memfd, off_t(c->seg_bytes)) != 0)
    throw Error(occlSystemError, format("ftruncate: %s", strerror(errno)));
  c->peers.resize(size_t(c->nranks));
  void* base = mmap(nullptr, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
  if (base == MAP_FAILED) throw Error(occlSystemError, format("mmap: %s", strerror(errno)));
  Peer& me = c->self();
  me.base = static_cast<char*>(base);
  me.pid = getpid();
  Ctrl* ctrl = new (me.base) Ctrl();
  ctrl->rank = c->rank;
  ctrl->nranks = c->nranks;
  ctrl->pid = getpid();
  ctrl->zero_copy = zero_copy_capable(c->device) ? 1 : 0;
  if (getrandom(ctrl->nonce, sizeof(ctrl->nonce), 0) != ssize_t(sizeof(ctrl->nonce)))
    throw Error(occlSystemError, "getrandom failed");
  ctrl->magic = kMagic;
  std::ostringstream info;
  info << host_identity() << " " << getpid() << " " << c->memfd << " " << hex(ctrl->nonce, 16)
       << " " << tcp_listen(c) << " " << (tcp_forced() ? 1 : 0);
  return info.str();
}

// Reach rank p as it published itself: through shared memory when it runs
// on this host, over TCP when it does not or when either side forces TCP
// (OCCL_TRANSPORT=tcp), so both ends of a pair always agree.
void map_peer(occlComm* c, int p, const std::string& published) {
  std::istringstream in(published);
  std::string host, nonce, addr, port;
  int pid = 0, fd = -1, force = 0;
  in >> host >> pid >> fd >> nonce >> addr >> port >> force;
  Peer& peer = c->peers[size_t(p)];
  if (host != host_identity() || force || tcp_forced()) {
    void* mirror = mmap(nullptr, c->seg_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mirror == MAP_FAILED) throw Error(occlSystemError, format("mmap: %s", strerror(errno)));
    peer.base = static_cast<char*>(mirror);
    peer.tcp = true;
    peer.addr = addr + " " + port;
    c->any_tcp = true;
    return;
  }
  peer.pid = pid;
  peer.pidfd = int(syscall(SYS_pidfd_open, pid, 0));
  std::string path = format("/proc/%d/fd/%d", pid, fd);
  int pfd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (pfd < 0)
    throw Error(occlSystemError, format("cannot open rank %d's segment %s: %s", p,
                                        path.c_str(), strerror(errno)));
  struct stat st;
  if (fstat(pfd, &st) != 0 || size_t(st.st_size) != c->seg_bytes) {
    close(pfd);
    throw Error(occlInvalidUsage, format("rank %d's segment has the wrong size (world sizes "
                                         "differ?)", p));
  }
  void* pb = mmap(nullptr, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
  close(pfd);
  if (pb == MAP_FAILED) throw Error(occlSystemError, format("mmap: %s", strerror(errno)));
  peer.base = static_cast<char*>(pb);
  Ctrl* pc = peer.ctrl();
  if (pc->magic != kMagic || hex(pc->nonce, 16) != nonce || pc->rank != p ||
      pc->nranks != c->nranks) {
    throw Error(occlInvalidUsage,
                format("the segment published by rank %d does not carry its identity (a "
                       "different job, or a recycled pid): refused", p));
  }
}

void connect(occlComm* c, occlStore* store) {
  // The job's token, which TCP peers must present: made by rank 0.
  const std::string job_key = c->store_prefix + "occl/job";
  if (c->rank == 0) {
    if (getrandom(c->job_token, sizeof(c->job_token), 0) != ssize_t(sizeof(c->job_token)))
      throw Error(occlSystemError, "getrandom failed");
    store->set(job_key, hex(c->job_token, 16));
  } else {
    const std::string h = store->get(job_key);
    for (size_t i = 0; i < 16 && 2 * i + 1 < h.size(); ++i)
      c->job_token[i] = uint8_t(strtoul(h.substr(2 * i, 2).c_str(), nullptr, 16));
  }
  store->set(c->store_prefix + "occl/rank/" + std::to_string(c->rank), create_segment(c));
  for (int p = 0; p < c->nranks; ++p) {
    if (p == c->rank) continue;
    map_peer(c, p, store->get(c->store_prefix + "occl/rank/" + std::to_string(p)));
  }
}
// [docs:occl-bootstrap:end]

// Everyone has mapped everyone (checked by one barrier): the memfd's
// descriptor is no longer needed (the mappings keep the memory alive).
void finish_init(occlComm* c) {
  OpCtx ctx{"occl:init", 0, Clock::now() + std::chrono::milliseconds(c->timeout_ms)};
  if (c->any_tcp) {
    tcp_connect_all(c, ctx.deadline);
  } else {
    close(c->listen_fd);
    c->listen_fd = -1;
  }
  // The barrier also tells everyone whether any pair talks over TCP: then
  // every rank uses whole slots per round (the rounds' sizes must agree).
  // And whether every rank reaches all its peers over TCP: then all of them
  // run the pipelined TCP all-reduce (the choice of algorithm must agree).
  const int par = c->parity();
  bool mine_all_tcp = c->nranks > 1;
  for (int p = 0; p < c->nranks; ++p)
    if (p != c->rank && !c->peers[size_t(p)].tcp) mine_all_tcp = false;
  char* flags = c->wslot(par, 0, 2);
  flags[0] = c->any_tcp ? 1 : 0;
  flags[1] = mine_all_tcp ? 1 : 0;
  OpDesc d;
  d.kind = kBarrier;
  c->post_and_wait(ctx, d);
  bool tcp_somewhere = false, tcp_everywhere = true;
  for (const Peer& p : c->peers) {
    tcp_somewhere = tcp_somewhere || p.slot(par)[0] == 1;
    tcp_everywhere = tcp_everywhere && p.slot(par)[1] == 1;
  }
  c->slot_bytes = tcp_somewhere ? kSlotBytes : kShmSlotBytes;
  c->all_tcp = tcp_everywhere;
  if (c->memfd >= 0) close(c->memfd);
  c->memfd = -1;
  c->zero_copy = true;  // mirrors of TCP peers say 0
  for (const Peer& p : c->peers) c->zero_copy = c->zero_copy && p.ctrl()->zero_copy == 1;
  c->ipc_cache.resize(size_t(c->nranks));
}

std::unique_ptr<occlComm> new_comm(int nranks, int rank, const occlConfig_t* cfg) {
  check_env_options();
  auto c = std::make_unique<occlComm>();
  c->rank = rank;
  c->nranks = nranks;
  c->device = cfg->device;
  c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30 * 60 * 1000;
  c->name = cfg->name ? cfg->name : "occl";
  c->sent_bytes.assign(size_t(nranks), 0);
  c->recv_bytes.assign(size_t(nranks), 0);
  orDeviceProp prop;
  if (orDeviceGetKernelViewOffset(cfg->device, &c->kview_offset) != orSuccess ||
      orGetDeviceProperties(&prop, cfg->device) != orSuccess) {
    orGetLastError();
    throw Error(occlInvalidArgument,
                format("device openreg:%d: %s", cfg->device, orGetLastErrorMessage()));
  }
  c->device_bytes = prop.totalGlobalMem;
  return c;
}

// [docs:occl-hierarchy]
// A communicator whose ranks are on several hosts (some pairs over shared
// memory, some over TCP) gets two levels, made by two splits of it: the
// ranks of each node (those reached through shared memory; the first of
// them is the node's leader), and the leaders. Every rank decides alike:
// whether some pair is over TCP and not every pair is, is known to all from
// init's barrier, and a node is named by its lowest rank.
bool mixed_transports(const occlComm* c) {
  return c->nranks > 2 && c->slot_bytes == kSlotBytes && !c->all_tcp;
}

void build_hierarchy(occlComm* c) {
  int node = c->rank;
  for (int p = 0; p < c->nranks; ++p)
    if (p != c->rank && !c->peers[size_t(p)].tcp) node = std::min(node, p);
  const std::string local_name = c->name + "/node", leaders_name = c->name + "/leaders";
  occlConfig_t local_cfg{c->device, c->timeout_ms, local_name.c_str()};
  occlConfig_t leaders_cfg{c->device, c->timeout_ms, leaders_name.c_str()};
  occlComm_t local = nullptr, leaders = nullptr;
  occlResult_t r = occlCommSplit(c, node, c->rank, &local, &local_cfg);
  if (r == occlSuccess)
    r = occlCommSplit(c, node == c->rank ? 0 : OCCL_SPLIT_NOCOLOR, c->rank, &leaders,
                      &leaders_cfg);
  c->local = local;
  c->leaders = leaders;
  if (r != occlSuccess)
    throw Error(r, std::string("building the node/leader levels: ") + occlGetLastError());
  // The two splits are the communicator's construction, not operations of
  // its user: its sequence numbers start with the user's first call, as on a
  // one-level communicator, so that an error names the operation by the
  // number the process group's Work gives it (every rank resets alike).
  c->enqueued.store(0);
  c->completed.store(0);
  c->coll_seq = 0;
}
// [docs:occl-hierarchy:end]

}  // namespace

// ------------------------------------------------------------ API
namespace occl {
const char* last_error_cstr() { return t_last_error.c_str(); }
}  // namespace occl

const char* occlGetLastError(void) { return occl::last_error_cstr(); }

const char* occlGetErrorString(occlResult_t r) {
  switch (r) {
    case occlSuccess: return "no error";
    case occlInvalidArgument: return "invalid argument";
    case occlInvalidUsage: return "invalid usage (ranks disagree)";
    case occlSystemError: return "system error";
    case occlRemoteError: return "remote error (a peer died or aborted)";
    case occlTimeout: return "timeout";
    case occlInternalError: return "internal error";
    case occlInProgress: return "in progress";
  }
  return "unknown result";
}

occlResult_t occlCommInitRank(occlComm_t* out, int nranks, int rank, occlStore* store,
                              const occlConfig_t* cfg) {
  if (!out || !store || !cfg)
    return set_last_error(occlInvalidArgument, "occlCommInitRank: NULL argument");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return set_last_error(occlInvalidArgument,
                          format("occlCommInitRank: rank %d out of range for %d ranks", rank, nranks));
  std::unique_ptr<occlComm> c;
  try {
    c = new_comm(nranks, rank, cfg);
  } catch (const Error& e) {
    return set_last_error(e.result, std::string("occlCommInitRank: ") + e.what());
  }
  try {
    connect(c.get(), store);
    finish_init(c.get());
    if (mixed_transports(c.get())) build_hierarchy(c.get());
  } catch (const Error& e) {
    return set_last_error(e.result, std::string("occlCommInitRank: ") + e.what());
  } catch (const std::exception& e) {
    return set_last_error(occlSystemError, std::string("occlCommInitRank: store: ") + e.what());
  }
  *out = c.release();
  return occlSuccess;
}

// [docs:occl-split]
// Splitting needs no store: the parent communicator carries the bootstrap.
// Round 1 swaps (color, key); every rank works out its new group and rank,
// creates its new segment, and round 2 swaps the segments' addresses through
// the parent's slots. It runs on the calling thread, once the parent's
// queued work has finished (like ncclCommSplit, it blocks the host).
occlResult_t occlCommSplit(occlComm_t comm, int color, int key, occlComm_t* newcomm,
                           const occlConfig_t* config) {
  if (!comm || !newcomm)
    return set_last_error(occlInvalidArgument, "occlCommSplit: NULL argument");
  *newcomm = nullptr;
  if (color < OCCL_SPLIT_NOCOLOR)
    return set_last_error(occlInvalidArgument, format("occlCommSplit: invalid color %d", color));
  const auto deadline = Clock::now() + std::chrono::milliseconds(comm->timeout_ms);
  while (comm->inflight.load() > 0) {
    if (Clock::now() >= deadline)
      return set_last_error(occlTimeout, "occlCommSplit: the parent's queued work did not finish");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  {
    std::lock_guard<std::mutex> g(comm->err_mu);
    if (comm->error != occlSuccess)
      return set_last_error(comm->error, "occlCommSplit: the parent communicator has failed: " +
                                             comm->error_msg);
  }
  occlConfig_t cfg{comm->device, comm->timeout_ms, comm->name.c_str()};
  if (config) cfg = *config;
  const uint64_t seq = comm->enqueued.fetch_add(1) + 1;  // a sequence number, like any op
  OpCtx ctx{"occl:split", seq, deadline};
  std::unique_ptr<occlComm> c;
  try {
    const uint64_t cseq = ++comm->coll_seq;
    OpDesc d;
    d.kind = kSplit;
    d.seq = cseq;
    int par = comm->parity();
    auto* mine = reinterpret_cast<int32_t*>(comm->wslot(par, 0, 2 * sizeof(int32_t)));
    mine[0] = color;
    mine[1] = key;
    comm->post_and_wait(ctx, d);
    std::vector<std::pair<int, int>> members;  // (key, parent rank) of my color
    for (int p = 0; p < comm->nranks; ++p) {
      const auto* theirs = reinterpret_cast<const int32_t*>(comm->peers[size_t(p)].slot(par));
      if (color != OCCL_SPLIT_NOCOLOR && theirs[0] == color) members.push_back({theirs[1], p});
    }
    std::sort(members.begin(), members.end());
    std::string info;
    int new_rank = -1;
    if (color != OCCL_SPLIT_NOCOLOR) {
      for (size_t i = 0; i < members.size(); ++i)
        if (members[i].second == comm->rank) new_rank = int(i);
      c = new_comm(int(members.size()), new_rank, &cfg);
      for (const auto& m : members) c->parent_ranks.push_back(m.second);
      memcpy(c->job_token, comm->job_token, sizeof(c->job_token));
      info = create_segment(c.get());
    }
    par = comm->parity();
    const size_t n = std::min(info.size(), kSlotBytes - 1);
    char* slot = comm->wslot(par, 0, n + 1);
    memcpy(slot, info.data(), n);
    slot[n] = 0;
    d.round = 1;
    comm->post_and_wait(ctx, d);
    if (c) {
      for (size_t i = 0; i < members.size(); ++i) {
        if (int(i) == new_rank) continue;
        map_peer(c.get(), int(i), std::string(comm->peers[size_t(members[i].second)].slot(par)));
      }
      // The new group's barrier; then nobody reads the parent's slots of
      // round 2 any more (the next parent round is a barrier of its own).
      finish_init(c.get());
    }
    d.round = 2;
    comm->post_and_wait(ctx, d);
  } catch (const Error& e) {
    comm->fail(seq, e.result, std::string("occl:split: ") + e.what());
    comm->completed.store(seq);
    return set_last_error(e.result, std::string("occlCommSplit: ") + e.what());
  } catch (const std::exception& e) {
    comm->fail(seq, occlInternalError, std::string("occl:split: ") + e.what());
    comm->completed.store(seq);
    return set_last_error(occlInternalError, std::string("occlCommSplit: ") + e.what());
  }
  comm->completed.store(seq);
  if (c && mixed_transports(c.get())) {  // collective over the new group's members
    try {
      build_hierarchy(c.get());
    } catch (const Error& e) {
      return set_last_error(e.result, std::string("occlCommSplit: ") + e.what());
    }
  }
  *newcomm = c.release();
  return occlSuccess;
}
// [docs:occl-split:end]

occlResult_t occlCommDestroy(occlComm_t comm) {
  if (!comm) return occlSuccess;
  forget_captures(comm);
  while (comm->inflight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  delete comm;
  return occlSuccess;
}

occlResult_t occlCommAbort(occlComm_t comm) {
  if (!comm) return occlSuccess;
  comm->aborting.store(true);
  forget_captures(comm);
  for (occlComm* sub : {comm->local, comm->leaders})
    if (sub) sub->aborting.store(true);
  comm->fail(comm->completed.load() + 1, occlRemoteError,
             format("communicator %s was aborted by rank %d", comm->name.c_str(), comm->rank));
  // Running work notices `aborting` within one sleep slice.
  while (comm->inflight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  delete comm;
  return occlSuccess;
}

occlResult_t occlCommCount(occlComm_t comm, int* count) {
  if (!comm || !count) return set_last_error(occlInvalidArgument, "occlCommCount: NULL argument");
  *count = comm->nranks;
  return occlSuccess;
}

occlResult_t occlCommUserRank(occlComm_t comm, int* rank) {
  if (!comm || !rank) return set_last_error(occlInvalidArgument, "occlCommUserRank: NULL argument");
  *rank = comm->rank;
  return occlSuccess;
}

occlResult_t occlCommGetAsyncError(occlComm_t comm, occlResult_t* result) {
  if (!comm || !result) return set_last_error(occlInvalidArgument, "occlCommGetAsyncError: NULL argument");
  std::lock_guard<std::mutex> g(comm->err_mu);
  *result = comm->error;
  return occlSuccess;
}

const char* occlCommGetErrorMessage(occlComm_t comm) {
  if (!comm) return "";
  std::lock_guard<std::mutex> g(comm->err_mu);
  return comm->error_msg.c_str();
}

uint64_t occlCommLastSeq(occlComm_t comm) { return comm ? comm->enqueued.load() : 0; }

occlResult_t occlCommQuerySeq(occlComm_t comm, uint64_t seq) {
  if (!comm) return set_last_error(occlInvalidArgument, "occlCommQuerySeq: comm is NULL");
  std::lock_guard<std::mutex> g(comm->err_mu);
  if (comm->error != occlSuccess && comm->error_seq <= seq) return comm->error;
  if (comm->completed.load() < seq) return occlInProgress;
  return occlSuccess;
}

const char* occlCommTransport(occlComm_t comm) {
  if (!comm) return "";
  bool shm = false, tcp = false;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    (comm->peers[size_t(p)].tcp ? tcp : shm) = true;
  }
  if (tcp) return shm ? "shm+tcp" : "tcp";
  return comm->zero_copy ? "shm+ipc" : "shm";
}
