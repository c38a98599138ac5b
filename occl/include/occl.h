// occl.h -- the public API of liboccl, OpenReg's collectives library.
//
// This is the part a vendor replaces with their own collectives library (their
// NCCL). It includes no torch header and links no torch library (the build
// enforces it); it talks to the device only through the runtime's C API
// (openreg.h). Its shape follows NCCL: a communicator per (group, rank), and
// collectives that take *device* pointers and are enqueued on a runtime
// stream as named device work ("occl:allreduce", ...), so stream ordering,
// events and the runtime trace (and with it the profiler) see them.
//
// Errors: every call returns an occlResult_t. A collective that fails while it
// runs (a peer died or timed out, mismatched calls) breaks the communicator,
// as NCCL does: occlCommGetAsyncError reports it, occlCommGetErrorMessage
// names the operation, its sequence number and the peer, and every later
// operation fails at once.
#pragma once

#include <openreg.h>

#include <stddef.h>
#include <stdint.h>

#include <string>

#define OCCL_API __attribute__((visibility("default")))

typedef enum occlResult_t {
  occlSuccess = 0,
  occlInvalidArgument = 1,  // bad pointer, count, rank, dtype/op pair
  occlInvalidUsage = 2,     // ranks disagree: mismatched collectives or sizes
  occlSystemError = 3,      // a system call failed (mmap, memfd, store)
  occlRemoteError = 4,      // a peer died or aborted
  occlTimeout = 5,          // a peer did not arrive within the timeout
  occlInternalError = 6,
  occlInProgress = 7,       // the queried operation has not finished yet
} occlResult_t;

// The input enums have a fixed int underlying type in C++ (OR_INT_ENUM, from
// openreg.h): any value a caller casts in is then a valid enum value that
// liboccl can check and refuse; with a plain enum, a value outside its range
// is undefined behaviour before any check runs.
typedef enum occlDataType_t OR_INT_ENUM {
  occlInt8, occlUint8, occlInt16, occlUint16, occlInt32, occlUint32,
  occlInt64, occlUint64, occlFloat16, occlBFloat16, occlFloat32, occlFloat64,
  occlBool, occlComplex64, occlComplex128,
  occlNumTypes
} occlDataType_t;

typedef enum occlRedOpKind_t OR_INT_ENUM {
  occlSum, occlProd, occlMin, occlMax,
  occlAvg,        // sum / nranks (integer types: truncating division)
  occlPreMulSum,  // sum of (scalar * x), NCCL's ncclRedOpCreatePreMulSum
  occlBand, occlBor, occlBxor,  // integer and bool types only
  occlNumOps
} occlRedOpKind_t;

typedef struct occlRedOp_t {
  occlRedOpKind_t kind;
  double scalar;  // occlPreMulSum only
} occlRedOp_t;

// Bootstrap key-value store. The c10d glue adapts torch's c10d::Store to it;
// the torch-free tests use a directory of files. get() blocks until the key
// exists (throwing std::exception on the store's own timeout).
class occlStore {
 public:
  virtual ~occlStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;
};

typedef struct occlComm* occlComm_t;

typedef struct occlConfig_t {
  int device;               // the openreg device whose memory this rank uses
  int64_t timeout_ms;       // every collective fails after this long
  const char* name;         // for messages ("default_pg", ...); may be NULL
} occlConfig_t;

// Size of an element of `dtype` in bytes (0 for an invalid type).
OCCL_API size_t occlTypeSize(occlDataType_t dtype);
OCCL_API const char* occlGetErrorString(occlResult_t result);
// The detail of the last failing call on this thread (init, enqueue).
OCCL_API const char* occlGetLastError(void);

// ---- communicators --------------------------------------------------------
// Collective over the `nranks` ranks sharing `store` (and key prefix).
OCCL_API occlResult_t occlCommInitRank(occlComm_t* comm, int nranks, int rank,
                                       occlStore* store, const occlConfig_t* config);
// Collective over `comm`: ranks with the same color form a new communicator,
// ordered by (key, rank). color < 0 (OCCL_SPLIT_NOCOLOR) yields *newcomm = NULL.
#define OCCL_SPLIT_NOCOLOR (-1)
OCCL_API occlResult_t occlCommSplit(occlComm_t comm, int color, int key,
                                    occlComm_t* newcomm, const occlConfig_t* config);
// Normal teardown; waits for the communicator's queued work to finish.
OCCL_API occlResult_t occlCommDestroy(occlComm_t comm);
// Teardown after an error: wakes and fails the peers' pending operations,
// stops running work, unmaps everything.
OCCL_API occlResult_t occlCommAbort(occlComm_t comm);
OCCL_API occlResult_t occlCommCount(occlComm_t comm, int* count);
OCCL_API occlResult_t occlCommUserRank(occlComm_t comm, int* rank);
// The first asynchronous error of the communicator (occlSuccess if none).
OCCL_API occlResult_t occlCommGetAsyncError(occlComm_t comm, occlResult_t* result);
OCCL_API const char* occlCommGetErrorMessage(occlComm_t comm);
// Every enqueued operation gets the next sequence number (1, 2, ...) of its
// communicator. Result of operation `seq`: occlInProgress until it finished,
// then occlSuccess or its error.
OCCL_API uint64_t occlCommLastSeq(occlComm_t comm);
OCCL_API occlResult_t occlCommQuerySeq(occlComm_t comm, uint64_t seq);
// "shm" or "shm+ipc" (zero copy): how this rank reaches its peers.
OCCL_API const char* occlCommTransport(occlComm_t comm);

// ---- collectives (enqueued on `stream`, asynchronous) -----------------------
// Buffers are device pointers on the communicator's device; send == recv is
// in place where it makes sense (all-reduce, broadcast, reduce).
OCCL_API occlResult_t occlAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    occlDataType_t dtype, occlRedOp_t op,
                                    occlComm_t comm, orStream_t stream);
OCCL_API occlResult_t occlBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    occlDataType_t dtype, int root,
                                    occlComm_t comm, orStream_t stream);
// recvbuff is only written (and may be NULL) on root.
OCCL_API occlResult_t occlReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 occlDataType_t dtype, occlRedOp_t op, int root,
                                 occlComm_t comm, orStream_t stream);
// recvbuff holds nranks * sendcount elements, rank r's at r * sendcount.
OCCL_API occlResult_t occlAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    occlDataType_t dtype, occlComm_t comm, orStream_t stream);
// sendbuff holds nranks * recvcount elements; rank r receives block r reduced.
OCCL_API occlResult_t occlReduceScatter(const void* sendbuff, void* recvbuff,
                                        size_t recvcount, occlDataType_t dtype,
                                        occlRedOp_t op, occlComm_t comm, orStream_t stream);
// Pairwise exchange with uneven sizes (elements): block for peer p is
// sendbuff[sdispls[p] .. + sendcounts[p]]; from p into recvbuff[rdispls[p] ..].
// Every rank's recvcounts[p] must equal peer p's sendcounts[rank].
OCCL_API occlResult_t occlAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuff,
                                    const size_t* recvcounts, const size_t* rdispls,
                                    occlDataType_t dtype, occlComm_t comm, orStream_t stream);
// recvbuff (root only) holds nranks * count elements.
OCCL_API occlResult_t occlGather(const void* sendbuff, void* recvbuff, size_t count,
                                 occlDataType_t dtype, int root,
                                 occlComm_t comm, orStream_t stream);
// sendbuff (root only) holds nranks * count elements.
OCCL_API occlResult_t occlScatter(const void* sendbuff, void* recvbuff, size_t count,
                                  occlDataType_t dtype, int root,
                                  occlComm_t comm, orStream_t stream);
OCCL_API occlResult_t occlBarrier(occlComm_t comm, orStream_t stream);

// ---- point to point ---------------------------------------------------------
// Messages between a pair of ranks arrive in order; a receive must match the
// next message's tag and size. peer = -1 in occlRecv receives from any rank;
// the source is stored in *source (which must stay valid until the work ran).
OCCL_API occlResult_t occlSend(const void* sendbuff, size_t count, occlDataType_t dtype,
                               int peer, int64_t tag, occlComm_t comm, orStream_t stream);
OCCL_API occlResult_t occlRecv(void* recvbuff, size_t count, occlDataType_t dtype,
                               int peer, int64_t tag, int* source,
                               occlComm_t comm, orStream_t stream);
// Between occlGroupStart and occlGroupEnd (per host thread), sends and
// receives are collected and run as one piece of device work that progresses
// all of them together, so exchanges in both directions cannot deadlock.
OCCL_API occlResult_t occlGroupStart(void);
OCCL_API occlResult_t occlGroupEnd(void);
