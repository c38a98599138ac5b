// The TCP transport: peers on other hosts (or every peer, with
// OCCL_TRANSPORT=tcp). The collective engine stays the same: a round frame
// carries what this rank wrote into its slots since the last round, and the
// receiver applies it to its private mirror of the sender's segment, so the
// algorithms read a TCP peer's slot as they read a shared-memory peer's.
// Point-to-point messages travel as frames of their own and wait in a
// per-peer inbox for the receive that consumes them.
//
// Vendor: your library has its own network transport (NCCL's socket and IB
// transports); what carries over is the bootstrap through the store and the
// identity check of every connection.
#include "internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

using namespace occl;

namespace occl {
namespace {

constexpr uint32_t kFrameMagic = 0x4f434631;  // "OCF1"
enum FrameType : uint32_t { kRoundFrame = 1, kMessageFrame = 2, kDataFrame = 3 };
struct FrameHdr {
  uint32_t magic;
  uint32_t type;
  uint64_t a;    // round: the step; message: the tag; data: its id
  uint64_t b;    // round: number of ranges; message, data: bytes
  uint64_t len;  // bytes after this header
};
struct RangeHdr {
  uint64_t parity, off, len;
};

constexpr uint64_t kHelloMagic = 0x314f4c4c45484f43ull;  // "COHELLO1"
struct Hello {
  uint64_t magic;
  uint8_t token[16];
  int32_t rank;     // who is speaking
  int32_t nranks;
  int32_t to_rank;  // who it thinks it is speaking to
  int32_t pad;
};

bool write_all(int fd, const void* p, size_t n, Clock::time_point deadline) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w > 0) {
      c += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && (errno == EINTR)) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) return false;
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, 20);
      continue;
    }
    return false;
  }
  return true;
}

bool read_all(int fd, void* p, size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n) {
    pollfd pf{fd, POLLIN, 0};
    const int left = int(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
    if (poll(&pf, 1, std::min(left, 1000)) <= 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    ssize_t r = recv(fd, c, n, 0);
    if (r > 0) {
      c += r;
      n -= size_t(r);
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
      return false;
    }
  }
  return true;
}

void tune(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

// The address this rank publishes: OCCL_SOCKET_ADDR, else the local address
// that routes to MASTER_ADDR (the address peers on other hosts can reach),
// else loopback.
std::string local_address() {
  if (const char* a = getenv("OCCL_SOCKET_ADDR"); a && *a) return a;
  const char* master = getenv("MASTER_ADDR");
  if (master && *master) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(master, "9", &hints, &res) == 0 && res) {
      int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      std::string out;
      if (s >= 0 && ::connect(s, res->ai_addr, res->ai_addrlen) == 0) {
        sockaddr_in me{};
        socklen_t len = sizeof(me);
        char buf[INET_ADDRSTRLEN];
        if (getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
            inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)))
          out = buf;
      }
      if (s >= 0) close(s);
      freeaddrinfo(res);
      if (!out.empty()) return out;
    }
  }
  return "127.0.0.1";
}

}  // namespace

bool tcp_forced() {
  const char* v = getenv("OCCL_TRANSPORT");
  if (!v || !*v) return false;
  if (strcmp(v, "tcp") == 0) return true;
  throw Error(occlInvalidArgument, format("OCCL_TRANSPORT: expected 'tcp' (or unset), got '%s'", v));
}

// Listen on an ephemeral port of the published address; "addr port".
std::string tcp_listen(occlComm* c) {
  const std::string addr = local_address();
  c->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->listen_fd < 0) throw Error(occlSystemError, format("socket: %s", strerror(errno)));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    throw Error(occlInvalidArgument, format("OCCL_SOCKET_ADDR: not an IPv4 address: %s", addr.c_str()));
  if (bind(c->listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(c->listen_fd, 64) != 0)
    throw Error(occlSystemError, format("cannot listen on %s%s: %s", addr.c_str(),
                                        getenv("OCCL_SOCKET_ADDR") ? " (OCCL_SOCKET_ADDR)" : "",
                                        strerror(errno)));
  socklen_t len = sizeof(sa);
  getsockname(c->listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return addr + " " + std::to_string(ntohs(sa.sin_port));
}

// [docs:occl-tcp-connect]
// Rank i connects to its TCP peers below it and accepts those above it. Both
// sides present (job token, own rank, world size, the rank they mean to
// reach); a connection whose identity is wrong (another job, a rank that
// is not expected, or one already connected) is refused and closed, and the
// rank keeps waiting for the right one until the timeout.
void tcp_connect_all(occlComm* c, Clock::time_point deadline) {
  auto hello = [&](int to) {
    Hello h{};
    h.magic = kHelloMagic;
    memcpy(h.token, c->job_token, 16);
    h.rank = c->rank;
    h.nranks = c->nranks;
    h.to_rank = to;
    return h;
  };
  auto valid = [&](const Hello& h, int expect_from) {
    return h.magic == kHelloMagic && memcmp(h.token, c->job_token, 16) == 0 &&
           h.nranks == c->nranks && h.to_rank == c->rank &&
           (expect_from >= 0 ? h.rank == expect_from
                             : (h.rank > c->rank && h.rank < c->nranks &&
                                c->peers[size_t(h.rank)].tcp && c->peers[size_t(h.rank)].sock < 0));
  };
  for (int p = 0; p < c->rank; ++p) {
    Peer& peer = c->peers[size_t(p)];
    if (!peer.tcp) continue;
    std::string host;
    int port = 0;
    {
      const size_t sp = peer.addr.find(' ');
      host = peer.addr.substr(0, sp);
      port = atoi(peer.addr.c_str() + sp + 1);
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    int fd = -1;
    while (true) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) break;
      close(fd);
      fd = -1;
      if (Clock::now() >= deadline)
        throw Error(occlTimeout, format("cannot connect to rank %d at %s:%d: %s", p, host.c_str(),
                                        port, strerror(errno)));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    tune(fd);
    Hello mine = hello(p), theirs{};
    if (!write_all(fd, &mine, sizeof(mine), deadline) ||
        !read_all(fd, &theirs, sizeof(theirs), deadline) || !valid(theirs, p)) {
      close(fd);
      throw Error(occlInvalidUsage,
                  format("the process at %s:%d did not identify as rank %d of this job: refused",
                         host.c_str(), port, p));
    }
    peer.sock = fd;
  }
  int expected = 0;
  for (int p = c->rank + 1; p < c->nranks; ++p) expected += c->peers[size_t(p)].tcp ? 1 : 0;
  while (expected > 0) {
    pollfd pf{c->listen_fd, POLLIN, 0};
    if (poll(&pf, 1, 100) <= 0) {
      if (Clock::now() >= deadline)
        throw Error(occlTimeout, format("rank %d: %d TCP peer(s) did not connect in time", c->rank,
                                        expected));
      continue;
    }
    int fd = accept4(c->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune(fd);
    Hello theirs{};
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (!read_all(fd, &theirs, sizeof(theirs), hello_deadline) || !valid(theirs, -1)) {
      fprintf(stderr, "[occl rank %d] refused a TCP connection with the wrong identity "
              "(another job, or an unexpected rank)\n", c->rank);
      close(fd);
      continue;
    }
    Hello mine = hello(theirs.rank);
    if (!write_all(fd, &mine, sizeof(mine), deadline)) {
      close(fd);
      continue;
    }
    c->peers[size_t(theirs.rank)].sock = fd;
    --expected;
  }
  for (Peer& p : c->peers)
    if (p.sock >= 0) fcntl(p.sock, F_SETFL, fcntl(p.sock, F_GETFL) | O_NONBLOCK);
  close(c->listen_fd);
  c->listen_fd = -1;
}
// [docs:occl-tcp-connect:end]

}  // namespace occl

namespace {

// Queue a frame: header and range headers copied into the frame, payload
// parts referenced (they stay valid until the frame has left).
void push_frame(Peer& peer, uint32_t type, uint64_t a, uint64_t b, const std::vector<char>& meta,
                const std::vector<std::pair<const char*, size_t>>& parts) {
  OutFrame f;
  size_t len = meta.size();
  for (auto& [p, n] : parts) len += n;
  FrameHdr h{kFrameMagic, type, a, b, len};
  f.own.resize(sizeof(h) + meta.size());
  memcpy(f.own.data(), &h, sizeof(h));
  if (!meta.empty()) memcpy(f.own.data() + sizeof(h), meta.data(), meta.size());
  f.total = f.own.size();
  peer.outq.push_back(std::move(f));
  OutFrame& q = peer.outq.back();
  q.parts.push_back({q.own.data(), q.own.size()});
  for (auto& part : parts) {
    if (!part.second) continue;
    q.parts.push_back(part);
    q.total += part.second;
  }
}

bool send_some(Peer& peer) {  // false: the socket is full
  while (!peer.outq.empty()) {
    OutFrame& f = peer.outq.front();
    iovec iov[64];
    int n = 0;
    size_t skip = f.sent;
    for (auto& [p, len] : f.parts) {
      if (skip >= len) {
        skip -= len;
        continue;
      }
      if (n == 64) break;
      iov[n].iov_base = const_cast<char*>(p) + skip;
      iov[n].iov_len = len - skip;
      skip = 0;
      ++n;
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = size_t(n);
    ssize_t w = sendmsg(peer.sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      return true;  // reported by the caller through send failing again
    }
    f.sent += size_t(w);
    if (f.sent == f.total) peer.outq.pop_front();
  }
  return true;
}

// A whole frame from rank p has arrived: apply a round to the mirror, keep
// a message for its receive.
// A round frame's body: the slot header, the range headers, then the
// ranges' bytes in the same order.
size_t round_meta_len(const FrameHdr& h) {
  return sizeof(SlotHeader) + size_t(h.b) * sizeof(RangeHdr);
}

[[noreturn]] void malformed(occlComm* c, const OpCtx& ctx, int p, const std::string& what) {
  throw Error(occlRemoteError,
              format("%s (seq %llu): rank %d sent a malformed frame (%s) while this rank (%d) was "
                     "exchanging with it: closing the connection",
                     ctx.name, (unsigned long long)ctx.seq, p, what.c_str(), c->rank));
}

// [docs:occl-tcp-validate]
// A frame header from rank p, checked before anything is allocated or
// written for it: a known type, sizes that a well-behaved peer can send
// (a round carries at most the two slots, a message at most what a device
// of this rank can hold), rounds in order. A peer that sends anything else
// (a bug, a corrupted stream, a hostile process that learned the job's
// token) fails the operation with a clear error instead of making this rank
// allocate what it asks for, write outside the mirror, or spin on a frame
// whose length disagrees with its contents.
void check_header(occlComm* c, const OpCtx& ctx, int p, const FrameHdr& h) {
  const Peer& peer = c->peers[size_t(p)];
  if (h.type == kRoundFrame) {
    if (h.b > 2) malformed(c, ctx, p, format("a round with %llu slot ranges", (unsigned long long)h.b));
    const size_t meta = round_meta_len(h);
    if (h.len < meta || h.len - meta > 2 * kSlotBytes)
      malformed(c, ctx, p, format("a round of %llu bytes", (unsigned long long)h.len));
    const uint32_t next = peer.tcp_step + 1;
    if (h.a != next)
      malformed(c, ctx, p, format("round %llu where round %u was due", (unsigned long long)h.a, next));
  } else if (h.type == kMessageFrame) {
    if (h.b != h.len || h.len > c->device_bytes)
      malformed(c, ctx, p, format("a message of %llu bytes (this device holds %zu)",
                                  (unsigned long long)h.len, c->device_bytes));
  } else if (h.type != kDataFrame) {
    malformed(c, ctx, p, format("unknown frame type %u", h.type));
  }
}

// A round frame's slot ranges, once its meta part has arrived: inside the
// slots, and exactly as many bytes as the frame says it carries.
void check_ranges(occlComm* c, const OpCtx& ctx, int p, const FrameHdr& h) {
  const char* ranges = c->peers[size_t(p)].in_body.get() + sizeof(SlotHeader);
  uint64_t total = 0;
  for (uint64_t i = 0; i < h.b; ++i) {
    RangeHdr r;
    memcpy(&r, ranges + i * sizeof(RangeHdr), sizeof(r));
    // (compared with the room left: off + len wraps for huge values.)
    if (r.parity > 1 || r.off > kSlotBytes || r.len > kSlotBytes - r.off)
      malformed(c, ctx, p, format("slot range %llu+%llu of slot %llu", (unsigned long long)r.off,
                                  (unsigned long long)r.len, (unsigned long long)r.parity));
    total += r.len;
  }
  if (total != h.len - round_meta_len(h))
    malformed(c, ctx, p, format("a round whose ranges hold %llu bytes but whose body holds %llu",
                                (unsigned long long)total,
                                (unsigned long long)(h.len - round_meta_len(h))));
}
// [docs:occl-tcp-validate:end]

// Where byte `got` of the body of the frame being received goes, and how
// many bytes from there belong together (check_header and check_ranges have
// vetted the frame).
void body_target(occlComm* c, int p, const FrameHdr& h, size_t got, char** dst, size_t* want) {
  Peer& peer = c->peers[size_t(p)];
  if (h.type == kDataFrame) {  // straight into its posted buffer
    *dst = peer.posts.front().dst + got;
    *want = size_t(h.len) - got;
    return;
  }
  if (h.type != kRoundFrame) {
    // A message's buffer grows with the bytes that actually arrive (at
    // least doubling), so a header that announces a huge message costs
    // nothing until the peer sends that much.
    if (got == peer.in_cap) {
      const size_t cap = std::min<size_t>(h.len, std::max<size_t>(2 * peer.in_cap, 1 << 20));
      std::unique_ptr<char[]> body(new char[cap]);
      if (got) memcpy(body.get(), peer.in_body.get(), got);
      peer.in_body = std::move(body);
      peer.in_cap = cap;
    }
    *dst = peer.in_body.get() + got;
    *want = peer.in_cap - got;
    return;
  }
  const size_t meta = round_meta_len(h);
  if (got < meta) {
    *dst = peer.in_body.get() + got;
    *want = meta - got;
    return;
  }
  size_t rel = got - meta;
  const char* ranges = peer.in_body.get() + sizeof(SlotHeader);
  for (uint64_t i = 0; i < h.b; ++i) {
    RangeHdr r;
    memcpy(&r, ranges + i * sizeof(RangeHdr), sizeof(r));
    if (rel < r.len) {
      *dst = peer.slot(int(r.parity)) + r.off + rel;
      *want = size_t(r.len - rel);
      return;
    }
    rel -= r.len;
  }
  throw Error(occlInternalError, format("rank %d's round frame: no range for byte %zu", p, got));
}

void deliver(occlComm* c, int p, const FrameHdr& h) {
  Peer& peer = c->peers[size_t(p)];
  if (h.type == kRoundFrame) {
    // The ranges are already in the mirror; the header completes the round.
    const uint32_t step = uint32_t(h.a);
    memcpy(peer.slot_header(int((step - 1) & 1u)), peer.in_body.get(), sizeof(SlotHeader));
    peer.tcp_step = step;
  } else if (h.type == kDataFrame) {
    peer.posts.pop_front();
    ++peer.data_got;
  } else if (h.type == kMessageFrame) {
    peer.inbox.push_back(TcpMessage{int64_t(h.a), std::move(peer.in_body), size_t(h.len)});
    peer.in_cap = 0;
  } else {
    throw Error(occlInternalError, format("rank %d: frame type %u passed the checks", p, h.type));
  }
}

// A data frame's header has arrived but no buffer is posted for it yet.
bool data_frame_blocked(const Peer& peer) {
  if (peer.in_got < sizeof(FrameHdr) || !peer.posts.empty()) return false;
  FrameHdr h;
  memcpy(&h, peer.in_hdr.data(), sizeof(h));
  return h.type == kDataFrame;
}

[[noreturn]] void lost(occlComm* c, const OpCtx& ctx, int p, const char* how) {
  throw Error(occlRemoteError,
              format("%s (seq %llu): rank %d's TCP connection %s while this rank (%d) was "
                     "exchanging with it (did it die or abort?)",
                     ctx.name, (unsigned long long)ctx.seq, p, how, c->rank));
}

}  // namespace

void occlComm::tcp_pump(const OpCtx& ctx, int timeout_ms) {
  std::vector<pollfd> pfs;
  std::vector<int> who;
  for (int p = 0; p < nranks; ++p) {
    Peer& peer = peers[size_t(p)];
    if (!peer.tcp || peer.sock < 0 || peer.closed) continue;
    const short in = data_frame_blocked(peer) ? 0 : POLLIN;
    pfs.push_back(pollfd{peer.sock, short(in | (peer.outq.empty() ? 0 : POLLOUT)), 0});
    who.push_back(p);
  }
  if (pfs.empty()) return;
  if (poll(pfs.data(), pfs.size(), timeout_ms) <= 0) return;
  for (size_t i = 0; i < pfs.size(); ++i) {
    const int p = who[i];
    Peer& peer = peers[size_t(p)];
    if (pfs[i].revents & POLLOUT) {
      const size_t before = peer.outq.size();
      if (send_some(peer) && !peer.outq.empty() && peer.outq.size() == before &&
          peer.outq.front().sent == 0)
        lost(this, ctx, p, "broke");
    }
    if (pfs[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      constexpr size_t kH = sizeof(FrameHdr);
      if (peer.in_hdr.size() != kH) peer.in_hdr.resize(kH);
      for (;;) {
        FrameHdr h;
        if (peer.in_got < kH) {
          ssize_t r = recv(peer.sock, peer.in_hdr.data() + peer.in_got, kH - peer.in_got,
                           MSG_DONTWAIT);
          // End of stream between frames: the peer finished (or died);
          // whoever still waits for it finds out in tcp_check_open.
          if (r == 0 && peer.in_got == 0) {
            peer.closed = true;
            break;
          }
          if (r == 0) lost(this, ctx, p, "was closed");
          if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            lost(this, ctx, p, "broke");
          }
          peer.in_got += size_t(r);
          if (peer.in_got < kH) continue;
          memcpy(&h, peer.in_hdr.data(), kH);
          if (h.magic != kFrameMagic) lost(this, ctx, p, "carried garbage");
          check_header(this, ctx, p, h);
          // A round frame's slot data goes straight into the mirror: only
          // its header part is buffered. A message is buffered whole.
          const size_t buffered = h.type == kRoundFrame ? round_meta_len(h) : 0;
          if (h.type == kMessageFrame) {  // body_target grows it as the bytes arrive
            peer.in_body.reset();
            peer.in_cap = 0;
          } else if (peer.in_cap < buffered || !peer.in_body) {
            peer.in_body.reset(new char[std::max<size_t>(1, buffered)]);
            peer.in_cap = buffered;
          }
        }
        memcpy(&h, peer.in_hdr.data(), kH);
        if (h.type == kDataFrame) {
          // Left in the socket until its buffer is posted (flow control).
          if (peer.posts.empty()) break;
          if (peer.posts.front().id != h.a || peer.posts.front().len != h.len)
            throw Error(occlInvalidUsage,
                        format("%s (seq %llu): rank %d sent data frame %llu of %llu bytes, but "
                               "rank %d expected frame %llu of %llu bytes (mismatched "
                               "collectives?)",
                               ctx.name, (unsigned long long)ctx.seq, p,
                               (unsigned long long)h.a, (unsigned long long)h.len, rank,
                               (unsigned long long)peer.posts.front().id,
                               (unsigned long long)peer.posts.front().len));
        }
        size_t got = peer.in_got - kH;
        if (got < h.len) {
          char* dst;
          size_t want;
          body_target(this, p, h, got, &dst, &want);
          ssize_t r = recv(peer.sock, dst, want, MSG_DONTWAIT);
          if (r == 0) lost(this, ctx, p, "was closed");
          if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            lost(this, ctx, p, "broke");
          }
          peer.in_got += size_t(r);
          got += size_t(r);
          if (h.type == kRoundFrame && got == round_meta_len(h)) check_ranges(this, ctx, p, h);
        }
        if (got == h.len) {
          peer.in_got = 0;
          deliver(this, p, h);
        }
      }
    }
  }
}

// [docs:occl-tcp-round]
// A round with TCP peers: send each of them this round's slot header and the
// slot ranges written since the last round, then move frames until every
// TCP peer's frame of this round has arrived and ours have left.
void occlComm::tcp_round(const OpCtx& ctx, uint32_t target) {
  const SlotHeader* hdr = self().slot_header(int((target - 1) & 1u));
  for (Peer& peer : peers) {
    if (!peer.tcp) continue;
    std::vector<char> meta(sizeof(SlotHeader));
    memcpy(meta.data(), hdr, sizeof(SlotHeader));
    std::vector<std::pair<const char*, size_t>> parts;
    uint64_t nranges = 0;
    // Body: the slot header, the range headers, then the ranges' bytes
    // (sent straight from the slots) in the same order.
    for (int par = 0; par < 2; ++par) {
      if (peer.dirty_hi[par] > peer.dirty_lo[par]) {
        RangeHdr r{uint64_t(par), peer.dirty_lo[par], peer.dirty_hi[par] - peer.dirty_lo[par]};
        const size_t at = meta.size();
        meta.resize(at + sizeof(r));
        memcpy(meta.data() + at, &r, sizeof(r));
        parts.push_back({self().slot(par) + r.off, size_t(r.len)});
        ++nranges;
      }
      peer.dirty_lo[par] = SIZE_MAX;
      peer.dirty_hi[par] = 0;
    }
    push_frame(peer, kRoundFrame, target, nranges, meta, parts);
    send_some(peer);
  }
  for (;;) {
    int behind = -1;
    bool sending = false;
    for (int p = 0; p < nranks; ++p) {
      const Peer& peer = peers[size_t(p)];
      if (!peer.tcp) continue;
      sending = sending || !peer.outq.empty();
      if (behind < 0 && int32_t(peer.tcp_step - target) < 0) behind = p;
    }
    if (behind < 0 && !sending) return;
    for (int p = 0; p < nranks; ++p) {
      const Peer& peer = peers[size_t(p)];
      if (peer.tcp && (int32_t(peer.tcp_step - target) < 0 || !peer.outq.empty()))
        tcp_check_open(ctx, p);
    }
    check_peer(ctx, behind >= 0 ? behind : rank, "the same collective (over TCP)");
    tcp_pump(ctx, 20);
  }
}
// [docs:occl-tcp-round:end]

void occlComm::tcp_flush(const OpCtx& ctx) {
  for (;;) {
    bool sending = false;
    for (const Peer& peer : peers) sending = sending || (peer.tcp && !peer.outq.empty());
    if (!sending) return;
    for (int p = 0; p < nranks; ++p)
      if (peers[size_t(p)].tcp && !peers[size_t(p)].outq.empty()) tcp_check_open(ctx, p);
    check_peer(ctx, rank, "its messages to be sent (over TCP)");
    tcp_pump(ctx, 20);
  }
}

void occlComm::tcp_send_message(int p, int64_t tag, const char* data, size_t bytes) {
  push_frame(peers[size_t(p)], kMessageFrame, uint64_t(tag), bytes, {}, {{data, bytes}});
  send_some(peers[size_t(p)]);
}

void occlComm::tcp_send_data(int p, uint64_t id, const char* data, size_t bytes) {
  push_frame(peers[size_t(p)], kDataFrame, id, bytes, {}, {{data, bytes}});
  send_some(peers[size_t(p)]);
}

void occlComm::tcp_post_recv(int p, uint64_t id, char* dst, size_t bytes) {
  peers[size_t(p)].posts.push_back(Peer::DataPost{id, dst, bytes});
}

void occlComm::tcp_check_open(const OpCtx& ctx, int p) {
  Peer& peer = peers[size_t(p)];
  // Called by whoever still waits for rank p: the frames it sent before
  // closing have all been delivered, so what we wait for will never come.
  if (peer.tcp && peer.closed) lost(this, ctx, p, "was closed");
}
