import socket, os, sys, time
port=int(sys.argv[1])
def conn(): return socket.create_connection(("127.0.0.1",port),timeout=7)
def tr(name, payload, wait_recv=True):
    s=conn(); t=time.time()
    try:
        s.sendall(payload)
        d=s.recv(200)
        print(name, "recv", len(d), "bytes in %.2fs"%(time.time()-t))
        if d:
            s.sendall(os.urandom(32)+b"AAAA")  # wrong MAC + extra
            print("   after bad mac:", s.recv(100))
    except Exception as e: print(name, repr(e), "%.2fs"%(time.time()-t))
    s.close()
tr("garbage", os.urandom(100))
tr("magic only", b"RLNR\x01")
tr("magic+nonce", b"RLNR\x01"+os.urandom(32))
tr("wrong magic", b"RLNR\x02"+os.urandom(32))
tr("short", b"RL")
tr("msgpack rpc no handshake", b"\x00\x81\xa7Entries\x90")
tr("huge", b"RLNR\x01"+os.urandom(32)+os.urandom(1<<20))
